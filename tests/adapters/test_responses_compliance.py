"""Open Responses compliance against the real server on the embedded model: every field of the
response object (JSON, SSE, WebSocket events, ``GET /v1/responses/{id}``) with the values applied,
tools and text formats echoed, unknown ``call_id`` refused, ``POST /v1/responses/compact`` and the
``compaction_trigger`` item, and a non-streaming request cancelled when its client leaves.

The required fields and their JSON types are the Open Responses ``ResponseResource`` schema's
(openresponses/openresponses, ``schema/responses.tsp``); the official ``openai`` SDK parses them too.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse

import httpx
import openai
import pytest
from websockets.sync.client import connect

from kvgate.models.embedded import EMBEDDED_SAMPLING
from tests.adapters.test_responses_render import check_event_stream, parse_sse, sdk_final_response
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SHORT = {"model": "smollm2", "max_output_tokens": 6}
NULLABLE = (type(None),)
REQUIRED = {  # field -> the JSON types it may have
    "id": (str,), "object": (str,), "created_at": (int,), "completed_at": (int, *NULLABLE), "status": (str,),
    "incomplete_details": (dict, *NULLABLE), "model": (str,), "previous_response_id": (str, *NULLABLE),
    "instructions": (str, *NULLABLE), "output": (list,), "error": (dict, *NULLABLE), "tools": (list,),
    "tool_choice": (str, dict), "truncation": (str,), "parallel_tool_calls": (bool,), "text": (dict,),
    "top_p": (float, int), "presence_penalty": (float, int), "frequency_penalty": (float, int),
    "top_logprobs": (int,), "temperature": (float, int), "reasoning": (dict, *NULLABLE), "user": (str, *NULLABLE),
    "usage": (dict, *NULLABLE), "max_output_tokens": (int, *NULLABLE), "max_tool_calls": (int, *NULLABLE),
    "store": (bool,), "background": (bool,), "service_tier": (str,), "metadata": (dict,),
    "safety_identifier": (str, *NULLABLE), "prompt_cache_key": (str, *NULLABLE),
}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("responses-compliance"), {"model": {"max_context": 8192}}) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def post(server, body, path="/v1/responses", timeout=120):
    return httpx.post(server.base_url + path, json=body, timeout=timeout)


def check_fields(response: dict) -> dict:
    for field, kinds in REQUIRED.items():
        assert field in response, field
        value = response[field]
        assert isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds), (field, value)
    if response["status"] == "completed":
        assert response["completed_at"] >= response["created_at"]
    return response


def test_defaults_applied_are_reported_never_null(server):
    response = check_fields(post(server, {**SHORT, "input": "Say hello."}).json())
    applied = (EMBEDDED_SAMPLING["temperature"], EMBEDDED_SAMPLING["top_p"], 0)  # the embedded model's own
    assert (response["temperature"], response["top_p"], response["top_logprobs"]) == applied
    assert (response["presence_penalty"], response["frequency_penalty"]) == (0.0, 0.0)
    assert (response["background"], response["service_tier"], response["max_tool_calls"]) == (False, "default", None)
    assert response["text"] == {"format": {"type": "text"}}


def test_request_values_are_echoed(server):
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    body = {**SHORT, "input": "Give me a.", "temperature": 0, "top_p": 0.5, "top_logprobs": 3,
            "presence_penalty": 0.5, "frequency_penalty": -0.25, "max_tool_calls": 2, "safety_identifier": "user-7",
            "prompt_cache_key": "thread-1", "tools": [TOOL, {**TOOL, "name": "strict_one", "strict": False}],
            "text": {"format": {"type": "json_schema", "name": "a", "description": "An a.", "schema": schema}}}
    response = check_fields(post(server, body).json())
    assert (response["temperature"], response["top_p"], response["top_logprobs"]) == (0.0, 0.5, 3)
    assert (response["presence_penalty"], response["frequency_penalty"]) == (0.5, -0.25)
    assert (response["max_tool_calls"], response["safety_identifier"], response["prompt_cache_key"]) == (
        2, "user-7", "thread-1")
    assert [tool["strict"] for tool in response["tools"]] == [None, False]
    assert response["tools"][0] == {**TOOL, "strict": None}
    fmt = response["text"]["format"]
    assert (fmt["description"], fmt["strict"], fmt["schema"]) == ("An a.", False, schema)


@pytest.mark.parametrize("body, param", [({"presence_penalty": 3}, "presence_penalty"),
                                         ({"frequency_penalty": "x"}, "frequency_penalty"),
                                         ({"max_tool_calls": 0}, "max_tool_calls"),
                                         ({"safety_identifier": 5}, "safety_identifier")])
def test_bad_new_fields_are_400_naming_them(server, body, param):
    reply = post(server, {**SHORT, "input": "x", **body})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param


def test_same_object_in_sse_events_websocket_events_and_retrieve(server, client):
    body = {**SHORT, "input": "Say hello.", "temperature": 0.3}
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**body, "stream": True}, timeout=120) as r:
        events = parse_sse(r.read().decode())
    final = check_event_stream(events)
    for event in events:
        if "response" in event:
            check_fields(event["response"])
            assert event["response"]["temperature"] == 0.3
    assert httpx.get(f"{server.base_url}/v1/responses/{final['id']}").json() == final
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        frames = [json.loads(socket.recv(timeout=120))]
        while frames[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
            frames.append(json.loads(socket.recv(timeout=120)))
    assert [check_fields(frame["response"])["temperature"] for frame in frames if "response" in frame]
    parsed = client.responses.retrieve(final["id"])
    assert parsed.service_tier == "default" and parsed.presence_penalty == 0 and parsed.temperature == 0.3
    assert parsed.completed_at is None or parsed.completed_at >= parsed.created_at


def test_sdk_create_parses_the_object(client):
    response = client.responses.create(input="Say hello.", tools=[TOOL], **SHORT)
    assert response.top_logprobs == 0 and response.background is False and response.max_tool_calls is None
    assert response.tools[0].name == "get_weather" and response.tools[0].strict is None


def test_unknown_call_id_is_400_over_http(server):
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    call = {"type": "function_call", "call_id": "call_known", "name": "get_weather", "arguments": '{"city":"Paris"}'}
    output = {"type": "function_call_output", "call_id": "call_lost", "output": "Sunny"}
    reply = post(server, {**SHORT, "tools": [TOOL], "input": [ask, call, output]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["type"] == "invalid_request_error"
    assert "call_lost" in error["message"] and error["param"] == "input[2].call_id"
    known = post(server, {**SHORT, "tools": [TOOL], "input": [ask, call, {**output, "call_id": "call_known"}]})
    assert known.status_code == 200
    first = post(server, {**SHORT, "tools": [TOOL], "input": [ask, call]}).json()  # the call, from a stored response
    chained = post(server, {**SHORT, "tools": [TOOL], "previous_response_id": first["id"],
                            "input": [{**output, "call_id": "call_known"}]})
    assert chained.status_code == 200
    lost = post(server, {**SHORT, "previous_response_id": first["id"], "input": [output]})
    assert lost.status_code == 400 and lost.json()["error"]["param"] == "input[0].call_id"


def test_unknown_call_id_is_an_error_frame_and_the_socket_stays_usable(server):
    output = {"type": "function_call_output", "call_id": "call_nowhere", "output": "Sunny"}
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **SHORT, "input": [output]}))
        frame = json.loads(socket.recv(timeout=120))
        assert frame["type"] == "error" and frame["status"] == 400
        assert frame["error"]["type"] == "invalid_request_error" and "call_nowhere" in frame["error"]["message"]
        assert frame["error"]["param"] == "input[0].call_id"
        socket.send(json.dumps({"type": "response.create", **SHORT, "input": "Say hello."}))
        while (frame := json.loads(socket.recv(timeout=120)))["type"] not in ("response.completed",
                                                                              "response.incomplete"):
            assert frame["type"] != "error", frame


CONVERSATION = [
    {"role": "user", "content": "My name is Ada and I am fixing a bug in parser.py."},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny in Paris. The bug is on line 12."},
    {"role": "user", "content": "Thanks. Keep going."},
]


def test_compact_returns_the_user_messages_and_exactly_one_compaction_item(server, client):
    body = {"model": "smollm2", "instructions": "You are a coding agent.", "tools": [TOOL], "input": CONVERSATION,
            "max_output_tokens": 16, "temperature": 0}
    reply = post(server, body, "/v1/responses/compact")
    assert reply.status_code == 200, reply.text
    compacted = reply.json()
    assert compacted["object"] == "response.compaction" and compacted["id"].startswith("resp_")
    assert isinstance(compacted["created_at"], int) and 0 < compacted["usage"]["output_tokens"] <= 16
    output = compacted["output"]
    assert [item["type"] for item in output] == ["message", "message", "compaction"]
    assert [item["content"][0]["text"] for item in output[:2]] == [CONVERSATION[0]["content"],
                                                                   CONVERSATION[4]["content"]]
    assert all(item["role"] == "user" and item["id"] for item in output[:2])
    assert isinstance(output[2]["encrypted_content"], str) and output[2]["id"].startswith("cmp_")
    follow = [*output, {"role": "user", "content": "What is my name?"}]
    count = post(server, {"model": "smollm2", "input": follow}, "/v1/responses/input_tokens").json()["input_tokens"]
    without = post(server, {"model": "smollm2", "input": follow[:2] + follow[3:]},
                   "/v1/responses/input_tokens").json()["input_tokens"]
    assert count > without  # the summary came back into the prompt
    assert post(server, {**SHORT, "input": follow}).status_code == 200
    again = post(server, {**body, "input": follow}, "/v1/responses/compact").json()["output"]
    assert [item["type"] for item in again] == ["message", "message", "message", "compaction"]
    sdk = client.responses.compact(model="smollm2", input="Remember: the answer is 42.", extra_body={
        "max_output_tokens": 8})
    assert [item.type for item in sdk.output] == ["message", "compaction"] and sdk.usage.output_tokens <= 8


def test_compact_with_previous_response_id_and_bad_input(server):
    first = post(server, {**SHORT, "input": "My name is Ada."}).json()
    chained = post(server, {"model": "smollm2", "previous_response_id": first["id"], "max_output_tokens": 8,
                            "input": "Summarise please."}, "/v1/responses/compact").json()
    assert [item["type"] for item in chained["output"]] == ["message", "message", "compaction"]
    assert chained["output"][0]["content"][0]["text"] == "My name is Ada."
    foreign = {"type": "compaction", "encrypted_content": "gAAAA-from-elsewhere"}
    reply = post(server, {**SHORT, "input": [foreign, {"role": "user", "content": "hi"}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input[0].encrypted_content"
    for body, code in (({"model": "smollm2", "input": []}, 400),
                       ({"model": "smollm2", "previous_response_id": "resp_unknown", "input": "x"}, 400)):
        reply = post(server, body, "/v1/responses/compact")
        assert reply.status_code == code and reply.json()["error"]["type"] == "invalid_request_error"


def test_compaction_trigger_answers_with_exactly_one_compaction_item(server):
    body = {"model": "smollm2", "temperature": 0, "max_output_tokens": 12, "store": False, "tools": [TOOL],
            "input": [*CONVERSATION, {"type": "compaction_trigger"}]}
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**body, "stream": True}, timeout=120) as r:
        events = parse_sse(r.read().decode())
    final = check_event_stream(events)
    assert final["status"] == "completed" and [item["type"] for item in final["output"]] == ["compaction"]
    assert [item.type for item in sdk_final_response(events).output] == ["compaction"]
    assert 0 < final["usage"]["output_tokens"] <= 12
    follow = [CONVERSATION[0], CONVERSATION[4], *final["output"], {"role": "user", "content": "Go on."}]
    assert post(server, {**SHORT, "input": follow}).status_code == 200
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        frames = [json.loads(socket.recv(timeout=120))]
        while frames[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
            frames.append(json.loads(socket.recv(timeout=120)))
    over_ws = check_event_stream(frames)
    assert [item["type"] for item in over_ws["output"]] == ["compaction"]


def in_flight(server) -> int:
    return httpx.get(server.base_url + "/health", timeout=10).json()["requests_in_flight"]


def open_raw_request(server, path: str, body: dict) -> socket.socket:
    """A POST sent over a plain socket, left unread: closing the socket is the client leaving."""
    address = urllib.parse.urlsplit(server.base_url)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    sock.sendall(head.encode() + payload)
    return sock


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
def test_a_non_streaming_client_that_leaves_cancels_its_request(server, path):
    body = {"model": "smollm2", "temperature": 0, "max_output_tokens": 2000,
            "input": "Write a very long story about a dragon and a knight."}
    sock = open_raw_request(server, path, body)
    started = time.monotonic()
    while not in_flight(server):
        assert time.monotonic() - started < 60, "the request never reached the engine"
        time.sleep(0.05)
    time.sleep(0.5)  # decoding now
    assert in_flight(server) == 1
    sock.close()
    left_at = time.monotonic()
    # The sequence ends at the engine's next step; handing its state to the cache may first wait
    # for an eviction's SSD write, slow on a busy CI disk.
    while in_flight(server) and time.monotonic() - left_at < 30:
        time.sleep(0.2)
    assert in_flight(server) == 0, "\n".join(line for line in server.log().splitlines()[-400:]
                                             if "/health" not in line)[-3000:]

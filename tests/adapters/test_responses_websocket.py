"""Responses over WebSocket against the real server: many ``response.create`` per socket, the
``generate: false`` warm-up, connection-local ``previous_response_id`` with ``store: false``,
error frames that keep the socket open, and the open-connection limit."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.adapters.test_responses_render import check_event_stream
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SHORT = {"model": "smollm2", "temperature": 0, "max_output_tokens": 4, "store": False}
LIMIT = 2
RECORDS = "requests.jsonl"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("responses-ws")
    settings = {"server": {"max_websocket_connections": LIMIT, "log_requests": True,
                           "record_path": str(workdir / RECORDS)},  # prompts and outputs as token ids
                "model": {"max_context": 8192},  # the trained context: "word " * 9000 overflows it
                "cache": {"cached_tokens_granularity": 1}}  # cached tokens reported exactly
    with ServerProcess(workdir, settings) as proc:
        yield proc


def ws_url(server, path="/v1/responses") -> str:
    return server.base_url.replace("http://", "ws://") + path


def create(socket, **body) -> list[dict]:
    """Send one response.create and read frames up to its terminal event (or an error frame)."""
    socket.send(json.dumps({"type": "response.create", **body}))
    frames = []
    while True:
        frame = json.loads(socket.recv(timeout=120))
        frames.append(frame)
        if frame["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return frames


def test_serial_requests_chain_in_memory_with_store_false(server):
    with connect(ws_url(server)) as socket:
        first = create(socket, **SHORT, input="My name is Ada.")
        first_final = check_event_stream(first)
        second = create(socket, **SHORT, previous_response_id=first_final["id"],
                        input=[{"role": "user", "content": "What is my name?"}])
        second_final = check_event_stream(second)
    alone = httpx.post(server.base_url + "/v1/responses/input_tokens",
                       json={"input": [{"role": "user", "content": "What is my name?"}]}).json()["input_tokens"]
    assert second_final["usage"]["input_tokens"] > first_final["usage"]["total_tokens"] > alone
    assert httpx.get(f"{server.base_url}/v1/responses/{first_final['id']}").status_code == 404


def test_warm_up_then_incremental_request(server):
    with connect(ws_url(server, "/responses")) as socket:
        warm = create(socket, **SHORT, input="Hello there.", generate=False)
        assert [f["type"] for f in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["usage"]["input_tokens"] > 0
        follow = create(socket, **SHORT, previous_response_id=warm[-1]["response"]["id"], input=[])
        final = check_event_stream(follow)
        assert final["usage"]["input_tokens"] == warm[-1]["response"]["usage"]["input_tokens"]


def test_a_warm_up_with_no_input_yet_completes_empty_and_a_generation_still_needs_input(server):
    """Codex warms a socket up at start-up, before there is any input: nothing to compute."""
    with connect(ws_url(server)) as socket:
        warm = create(socket, **SHORT, input=[], generate=False)
        assert [f["type"] for f in warm] == ["response.created", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and warm[-1]["response"]["usage"]["input_tokens"] == 0
        empty = create(socket, **SHORT, input=[])
        assert empty[-1]["type"] == "error" and "input is empty" in empty[-1]["error"]["message"]
        check_event_stream(create(socket, **SHORT, previous_response_id=warm[-1]["response"]["id"], input="Hi"))


def test_errors_are_frames_and_the_socket_stays_open(server):
    with connect(ws_url(server)) as socket:
        socket.send("{not json")
        bad_json = json.loads(socket.recv(timeout=30))
        assert bad_json["type"] == "error" and bad_json["status"] == 400 and bad_json["error"]["message"]
        socket.send(json.dumps({"type": "response.processed", "response_id": "x"}))  # ignored
        missing = create(socket, **SHORT, input="x", previous_response_id="resp_unknown")
        assert missing == [{"type": "error", "status": 400, "error": {
            "type": "invalid_request_error", "code": "previous_response_not_found",
            "message": "Previous response with id 'resp_unknown' not found.", "param": "previous_response_id"}}]
        overflow = create(socket, **SHORT, input="word " * 9000)
        assert overflow[-1]["type"] == "response.failed"
        assert overflow[-1]["response"]["error"]["code"] == "context_length_exceeded"
        check_event_stream(create(socket, **SHORT, input="Still there?"))


def test_connection_limit_sends_an_error_and_closes(server):
    with connect(ws_url(server)) as first, connect(ws_url(server)) as second:
        with connect(ws_url(server)) as third:
            frame = json.loads(third.recv(timeout=30))
            assert frame["type"] == "error" and frame["error"]["code"] == "websocket_connection_limit_reached"
            with pytest.raises(ConnectionClosed):
                third.recv(timeout=30)
        check_event_stream(create(first, **SHORT, input="Hi"))
        assert second.protocol.state.name == "OPEN"
    with connect(ws_url(server)) as again:  # slots are released when sockets close
        check_event_stream(create(again, **SHORT, input="Hi"))
    assert server.wait_for_log("WEBSOCKET /v1/responses 101"), server.log()[-2000:]


def test_openai_sdk_websocket_connection(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="smollm2", input="Reply with one word: yes or no?",
                                   max_output_tokens=8, temperature=0, store=False)
        kinds = []
        for event in connection:
            kinds.append(event.type)
            if event.type in ("response.completed", "response.incomplete", "response.failed"):
                break
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert event.response.output_text


def in_flight(server) -> int:
    return httpx.get(server.base_url + "/health").json()["requests_in_flight"]


@pytest.mark.parametrize("generate", [False, True])
def test_a_client_that_leaves_cancels_its_request(server, generate):
    """A long prefill (warm-up or generation) stops once the socket closes, not when it ends."""
    with connect(ws_url(server)) as socket:
        socket.send(json.dumps({"type": "response.create", **SHORT, "max_output_tokens": 400,
                                "input": "story " * 6000, "generate": generate}))
        assert json.loads(socket.recv(timeout=60))["type"] == "response.created"
        assert in_flight(server) == 1
    deadline = time.monotonic() + 5
    while in_flight(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_flight(server) == 0
    assert server.wait_for_log("client left; request cancelled"), server.log()[-2000:]
    assert server.wait_for_log("response.create cancelled"), server.log()[-2000:]
    line = [l for l in server.log().splitlines() if "response.create cancelled" in l][-1]
    assert "the client left after" in line and float(line.rsplit("after ", 1)[1].rstrip("s")) > 0


GET_WEATHER = {"type": "function", "name": "get_weather", "description": "Weather forecast for a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = {"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}
TOOL_RUN = {"model": "smollm2", "temperature": 0, "max_output_tokens": 48, "store": False}


def records(server) -> list[dict]:
    path = server.workdir / RECORDS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def created_with_record(server, socket, **body) -> tuple[dict, dict]:
    """(final response, the recorder's line for it: prompt and output token ids, cached tokens)."""
    before = len(records(server))
    final = check_event_stream(create(socket, **body))
    added = records(server)[before:]
    assert len(added) == 1
    return final, added[0]


@pytest.mark.parametrize("announced_in", ["tools", "additional_tools"])
def test_a_tool_round_trip_keeps_the_tools_and_the_cached_prefix(server, announced_in):
    """Codex's follow-up frame holds only the tool output and ``previous_response_id``: the tools
    of the first frame (top-level, or an ``additional_tools`` input item) stay in the prompt, so it
    extends the first prompt and output token for token, and the fence still enforces them."""
    if announced_in == "tools":
        opening = {"tools": [GET_WEATHER], "input": [ASK]}
    else:
        opening = {"input": [{"type": "additional_tools", "role": "developer", "tools": [GET_WEATHER]}, ASK]}
    with connect(ws_url(server)) as socket:
        first, first_record = created_with_record(server, socket, **TOOL_RUN, **opening, tool_choice="required",
                                                  parallel_tool_calls=False)
        call = first["output"][-1]
        assert call["type"] == "function_call" and call["name"] == "get_weather"
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C."}
        second, second_record = created_with_record(server, socket, **TOOL_RUN, previous_response_id=first["id"],
                                                    input=[output])
        third, _ = created_with_record(server, socket, **TOOL_RUN, previous_response_id=second["id"],
                                       input=[{"role": "user", "content": "And in Rome?"}], tool_choice="required")
    seen = first_record["prompt"] + first_record["output"]
    assert second_record["prompt"][:len(seen)] == seen
    # all of it from the cache but the last output token, whose KV was never computed
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= len(seen) - 1
    assert second["usage"]["input_tokens"] == len(second_record["prompt"])
    split = second["usage"]["kvgate"]
    assert split["cached_tokens_device"] + split["cached_tokens_ssd"] == second["usage"]["input_tokens_details"]["cached_tokens"]
    assert split["replayed_tokens"] == 0
    again = third["output"][-1]  # ``required`` needs tools: the conversation's are still in force
    assert again["type"] == "function_call" and again["name"] == "get_weather"
    assert set(json.loads(again["arguments"])) == {"city"}


def log_line_with(server, *parts: str, timeout: float = 10.0) -> bool:
    """Whether one line of the server's log holds every one of ``parts`` within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(all(part in line for part in parts) for line in server.log().splitlines()):
            return True
        time.sleep(0.05)
    return False


def test_each_response_on_a_socket_gets_its_own_log_line(server):
    with connect(ws_url(server)) as socket:
        answers = [check_event_stream(create(socket, **SHORT, input=text)) for text in ("Hi", "Hello")]
        missing = create(socket, **SHORT, input="x", previous_response_id="resp_gone")
        assert missing[-1]["type"] == "error"
    for answer in answers:
        wanted = (f"WEBSOCKET /v1/responses response.create {answer['status']} ", answer["id"])
        assert log_line_with(server, *wanted), server.log()[-2000:]  # written when its response ends
    assert server.wait_for_log("WEBSOCKET /v1/responses response.create 400 "), server.log()[-2000:]
    line = [l for l in server.log().splitlines() if "response.create 400" in l][-1]
    assert "previous_response_not_found" in line and "WARNING" in line


def test_frames_past_the_pending_limit_are_refused_and_the_socket_stays_usable(server):
    from kvgate.adapters.responses.ws_connection import MAX_PENDING_FRAMES

    flood = MAX_PENDING_FRAMES + 6
    with connect(ws_url(server)) as socket:
        socket.send(json.dumps({"type": "response.create", **SHORT, "max_output_tokens": 200, "input": "Tell a story."}))
        for index in range(flood):  # sent while the first one runs
            socket.send(json.dumps({"type": "response.create", **SHORT, "input": f"queued {index}"}))
        terminal, refused = 0, 0
        while terminal + refused < flood + 1:
            frame = json.loads(socket.recv(timeout=120))
            if frame["type"] == "error":
                assert frame["error"]["code"] == "too_many_pending_requests", frame
                refused += 1
            elif frame["type"] in ("response.completed", "response.incomplete"):
                terminal += 1
        assert refused >= flood - MAX_PENDING_FRAMES and terminal == flood + 1 - refused
        check_event_stream(create(socket, **SHORT, input="Still there?"))

"""Schemas through the real server: every protocol admits a recursive schema (relaxed, listed in
its kvgate extension), refuses a non-schema with a short 400 in its own shape, and a costly
constraint compiled off the event loop stalls no other request."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
RECURSIVE = {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}
INVALID = {"type": "object", "properties": {"a": {"type": "strin"}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("schemas")) as proc:
        yield proc


def chat(schema):
    return "/v1/chat/completions", {"model": "smollm2", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
                                    "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
                                    "tool_choice": "required"}


def anthropic(schema):
    return "/v1/messages", {"model": "smollm2", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
                            "tools": [{"name": "f", "input_schema": schema}], "tool_choice": {"type": "any"}}


def responses(schema):
    return "/v1/responses", {"model": "smollm2", "max_output_tokens": 16, "input": "hi", "tool_choice": "required",
                             "tools": [{"type": "function", "name": "f", "parameters": schema}]}


@pytest.mark.parametrize("shape", [chat, anthropic, responses])
def test_recursive_schema_is_served_and_relaxation_listed(server, shape):
    path, body = shape(RECURSIVE)
    reply = httpx.post(server.base_url + path, json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data.get("status", "completed") in ("completed", "incomplete")
    assert any("recursive $ref" in note for note in data["kvgate"]["relaxed_schema"])


@pytest.mark.parametrize("shape", [chat, anthropic, responses])
def test_invalid_schema_is_a_short_400_in_the_protocol_shape(server, shape):
    path, body = shape(INVALID)
    reply = httpx.post(server.base_url + path, json=body, timeout=60)
    assert reply.status_code == 400 and len(reply.text) < 400, reply.text
    error = reply.json()["error"]
    assert "'f'" in error["message"] and "type" in error["message"]
    assert (reply.json().get("type") == "error") == (shape is anthropic)


def test_websocket_serves_a_recursive_schema_and_refuses_a_non_schema_in_frames(server):
    from websockets.sync.client import connect

    def create(socket, schema) -> dict:
        _, body = responses(schema)
        socket.send(json.dumps({"type": "response.create", **body}))
        while True:
            frame = json.loads(socket.recv(timeout=120))
            if frame["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                return frame

    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        served = create(socket, RECURSIVE)
        refused = create(socket, INVALID)
        again = create(socket, RECURSIVE)  # the socket stays usable after the refusal
    assert served["type"] == "response.incomplete" and "relaxed_schema" in served["response"]["kvgate"]
    assert refused["type"] == "error" and "'f'" in json.dumps(refused) and len(json.dumps(refused)) < 600
    assert again["type"] == "response.incomplete"


def test_costly_constraint_does_not_stall_a_concurrent_request(server):
    plain = {"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    url = server.base_url + "/v1/chat/completions"
    started = time.monotonic()
    assert httpx.post(url, json=plain, timeout=60).status_code == 200
    alone = time.monotonic() - started
    schema = {"type": "object", "properties": {  # not rendered into the prompt: only the fence pays for it
        f"p{i}": {"anyOf": [{"type": "string", "pattern": f"^[a-z]{{{j},{j + i}}}x{i}$"} for j in range(8)]}
        for i in range(400)}, "required": [f"p{i}" for i in range(400)]}
    costly = {"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
              "response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}}
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(reply=httpx.post(url, json=costly, timeout=120)))
    worker.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert httpx.post(url, json=plain, timeout=60).status_code == 200
    beside = time.monotonic() - started
    worker.join()
    print(f"plain request alone {alone:.2f} s, beside the costly one {beside:.2f} s; "
          f"costly: {outcome['reply'].status_code} {outcome['reply'].text[:160]}")
    assert outcome["reply"].status_code in (200, 400) and len(outcome["reply"].text) < 2000
    assert beside < alone + 1.0

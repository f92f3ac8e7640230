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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"server": {"max_websocket_connections": LIMIT, "log_requests": True},
                "model": {"max_context": 8192}}  # the trained context: "word " * 9000 overflows it
    with ServerProcess(tmp_path_factory.mktemp("responses-ws"), settings) as proc:
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

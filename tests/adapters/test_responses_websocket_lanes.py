"""Responses WebSocket lanes (``stream_id``) against the real server: two lanes on one socket run
at the same time and interleave, every event of a lane carries its ``stream_id`` (the official SDK
sends and reads it), one lane is FIFO, a lane forks from another's response through the prefix
cache, the lane limit is an error frame on an open socket, and a close cancels every lane."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from websockets.sync.client import connect

from tests.adapters.test_responses_render import check_event_stream
from tests.adapters.test_responses_websocket import in_flight, log_line_with, ws_url
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
LANES = 2
SHORT = {"model": "smollm2", "temperature": 0, "max_output_tokens": 4, "store": False}
LONG = {**SHORT, "max_output_tokens": 16, "input": "Write a long story about a dragon and a knight."}
TERMINALS = ("response.completed", "response.incomplete", "response.failed")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("responses-ws-lanes")
    settings = {"server": {"max_websocket_lanes": LANES, "log_requests": True},
                "model": {"max_context": 8192},  # room for the long prefills of the cancellation test
                "cache": {"cached_tokens_granularity": 1}}  # cached tokens reported exactly
    with ServerProcess(workdir, settings) as proc:
        yield proc


def send(socket, **body) -> None:
    socket.send(json.dumps({"type": "response.create", **body}))


def read_until(socket, terminals: int) -> list[dict]:
    """Frames up to the ``terminals``-th terminal event or error frame."""
    frames, seen = [], 0
    while seen < terminals:
        frames.append(json.loads(socket.recv(timeout=120)))
        seen += frames[-1]["type"] in (*TERMINALS, "error")
    return frames


def test_two_lanes_interleave_and_every_event_carries_its_lane(server):
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    with client.responses.connect() as connection:
        for lane in ("a", "b"):
            connection.response.create(**LONG, stream_id=lane)
        events, finished = [], 0
        for event in connection:
            events.append(event)
            finished += event.type in TERMINALS
            if finished == 2:
                break
    assert {event.stream_id for event in events} == {"a", "b"}
    by_lane = {lane: [e.model_dump() for e in events if e.stream_id == lane] for lane in ("a", "b")}
    finals = {lane: check_event_stream(frames) for lane, frames in by_lane.items()}
    order = [event.stream_id for event in events]
    first_a, last_a = order.index("a"), len(order) - 1 - order[::-1].index("a")
    assert "b" in order[first_a:last_a], order  # lane b ran while lane a was still answering
    for lane, final in finals.items():
        assert final["status"] in ("completed", "incomplete") and final["usage"]["output_tokens"] > 1
        assert log_line_with(server, "WEBSOCKET /v1/responses response.create", f"stream_id={lane}", final["id"])


def test_one_lane_is_fifo_and_the_default_lane_is_untagged(server):
    with connect(ws_url(server)) as socket:
        for index in range(3):
            send(socket, **SHORT, stream_id="a", input=f"Say {index}.", metadata={"index": str(index)})
        send(socket, **SHORT, input="Hello.", metadata={"index": "default"})
        frames = read_until(socket, 4)
    lane_a = [frame for frame in frames if frame.get("stream_id") == "a"]
    default = [frame for frame in frames if "stream_id" not in frame]
    assert len(lane_a) + len(default) == len(frames)
    created = [frame["response"]["metadata"]["index"] for frame in lane_a if frame["type"] == "response.created"]
    assert created == ["0", "1", "2"]
    ids = [frame["response"]["id"] for frame in lane_a if frame["type"] in ("response.created", *TERMINALS)]
    assert ids == [ids[0], ids[0], ids[2], ids[2], ids[4], ids[4]]  # each one ends before the next starts
    assert check_event_stream(default)["metadata"] == {"index": "default"}


def test_a_lane_forks_from_another_lanes_response_through_the_cache(server):
    opening = "My name is Ada and I live in a lighthouse by the sea with three cats."
    with connect(ws_url(server)) as socket:
        send(socket, **SHORT, stream_id="main", input=opening)
        first = check_event_stream(read_until(socket, 1))
        send(socket, **SHORT, stream_id="fork", previous_response_id=first["id"],
             input=[{"role": "user", "content": "What is my name?"}])
        fork_frames = read_until(socket, 1)
    assert {frame["stream_id"] for frame in fork_frames} == {"fork"}
    fork = check_event_stream(fork_frames)
    assert fork["previous_response_id"] == first["id"]
    assert fork["usage"]["input_tokens"] > first["usage"]["total_tokens"]
    assert fork["usage"]["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"]


def test_the_lane_limit_is_an_error_frame_and_the_socket_stays_open(server):
    with connect(ws_url(server)) as socket:
        for lane in ("a", "b", "c"):  # c arrives while a and b run: one lane past the limit
            send(socket, **LONG, stream_id=lane)
        frames = read_until(socket, 3)
        refused = [frame for frame in frames if frame["type"] == "error"]
        assert refused == [{"type": "error", "status": 429, "stream_id": "c", "error": {
            "type": "rate_limit_error", "code": "websocket_lane_limit_reached", "param": None,
            "message": refused[0]["error"]["message"]}}]
        assert f"at most {LANES}" in refused[0]["error"]["message"]
        send(socket, **SHORT, stream_id="c", input="Hi")  # a and b have finished: room again
        assert {frame["stream_id"] for frame in read_until(socket, 1)} == {"c"}


def test_a_lanes_errors_carry_its_lane(server):
    with connect(ws_url(server)) as socket:
        send(socket, **SHORT, stream_id="e", input="x", previous_response_id="resp_unknown")
        missing = json.loads(socket.recv(timeout=60))
        assert missing["stream_id"] == "e" and missing["error"]["code"] == "previous_response_not_found"
        send(socket, **SHORT, stream_id=7, input="x")
        bad = json.loads(socket.recv(timeout=60))
        assert bad["status"] == 400 and bad["error"]["param"] == "stream_id" and "stream_id" not in bad
        send(socket, **SHORT, stream_id="e", input="Still there?")
        assert check_event_stream(read_until(socket, 1))["status"] in ("completed", "incomplete")


def test_closing_the_socket_cancels_every_lane(server):
    with connect(ws_url(server)) as socket:
        for lane in ("a", "b"):
            send(socket, **{**SHORT, "max_output_tokens": 400}, stream_id=lane, input=f"{lane} " + "story " * 5000)
        created = set()
        while len(created) < 2:
            frame = json.loads(socket.recv(timeout=60))
            assert frame["type"] in ("response.created", "response.in_progress"), frame
            if frame["type"] == "response.created":
                created.add(frame["stream_id"])
        assert in_flight(server) == 2  # both prefills run in the engine at once
    deadline = time.monotonic() + 10
    while in_flight(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_flight(server) == 0
    for lane in ("a", "b"):
        assert log_line_with(server, "response.create cancelled", f"stream_id={lane}"), server.log()[-2000:]
    assert httpx.get(server.base_url + "/health").status_code == 200

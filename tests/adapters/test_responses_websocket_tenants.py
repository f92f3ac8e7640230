"""Responses WebSockets of one tenant never lock another out (issue 31, finding 9), against the real
server: the open-socket limit is per tenant (``[server] max_websocket_connections``) under a total
for all (``max_websocket_connections_total``), and a socket idle past
``websocket_idle_timeout`` is closed (code 1001) while one with a running response is not."""

from __future__ import annotations

import json
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.adapters.test_responses_render import check_event_stream
from tests.adapters.test_responses_websocket import create, ws_url
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
KEYS = {"alice": "key-alice", "bob": "key-bob"}
PER_TENANT, TOTAL, IDLE = 2, 3, 1.5
SHORT = {"model": "smollm2", "temperature": 0, "max_output_tokens": 2, "store": False}
COUNT = "Count from 1 to 300, separated by commas."  # a long answer: no early end of turn


def tenant_server(workdir, **server_settings) -> ServerProcess:
    keys = [{"tenant": name, "key": key} for name, key in KEYS.items()]
    return ServerProcess(workdir, {"server": {"keys": keys, **server_settings}, "cache": {"ssd_enabled": False}})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Limits, and the default idle timeout (an hour): the sockets here wait on one another."""
    limits = {"max_websocket_connections": PER_TENANT, "max_websocket_connections_total": TOTAL}
    with tenant_server(tmp_path_factory.mktemp("ws-limits"), **limits) as proc:
        yield proc


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory):
    limits = {"max_websocket_connections": PER_TENANT, "websocket_idle_timeout": IDLE}
    with tenant_server(tmp_path_factory.mktemp("ws-idle"), **limits) as proc:
        yield proc


def socket_of(server, who: str):
    return connect(ws_url(server), additional_headers={"Authorization": f"Bearer {KEYS[who]}"})


def refusal(socket) -> str:
    """The limit error frame's message; the server then closes the socket."""
    frame = json.loads(socket.recv(timeout=30))
    assert frame["type"] == "error" and frame["error"]["code"] == "websocket_connection_limit_reached", frame
    with pytest.raises(ConnectionClosed):
        socket.recv(timeout=30)
    return frame["error"]["message"]


def closed_after(socket) -> tuple[float, ConnectionClosed]:
    """Seconds until the server closes ``socket`` (no frame arrives meanwhile) and how."""
    started = time.monotonic()
    with pytest.raises(ConnectionClosed) as closed:
        socket.recv(timeout=IDLE + 30)
    return time.monotonic() - started, closed.value


def test_one_tenants_sockets_do_not_lock_out_another(server):
    with socket_of(server, "alice") as first, socket_of(server, "alice") as second:
        with socket_of(server, "alice") as third:
            assert "for this API key" in refusal(third)
        with socket_of(server, "bob") as bobs:  # alice is at her limit; bob is not
            check_event_stream(create(bobs, **SHORT, input="Hi"))
            with socket_of(server, "bob") as over_total:
                assert "on this server" in refusal(over_total)
        check_event_stream(create(first, **SHORT, input="Hi"))
        assert second.protocol.state.name == "OPEN"


def test_an_idle_socket_is_closed_and_its_slot_released(idle_server):
    server = idle_server
    with socket_of(server, "alice") as idle:
        check_event_stream(create(idle, **SHORT, input="Hi"))
        seconds, closed = closed_after(idle)
    assert IDLE * 0.8 <= seconds <= IDLE + 10, seconds
    assert closed.rcvd.code == 1001 and "websocket_idle_timeout" in closed.rcvd.reason
    with socket_of(server, "alice") as one, socket_of(server, "alice") as two:  # both slots free again
        for accepted in (one, two):  # served (a bad frame's 400), not refused; then idle again
            accepted.send("{not json")
            assert json.loads(accepted.recv(timeout=30))["status"] == 400


def tokens_for(seconds: float, socket) -> int:
    """How many output tokens take about ``seconds`` on this machine now, from an 8-token response."""
    started = time.monotonic()
    check_event_stream(create(socket, **{**SHORT, "max_output_tokens": 8}, input=COUNT))
    return max(8, min(400, round(seconds / ((time.monotonic() - started) / 8))))


def test_a_socket_with_a_running_response_is_not_closed(idle_server):
    """A response that runs well past the idle timeout, with no client frame, completes; the
    clock starts after it."""
    with socket_of(idle_server, "bob") as busy:
        many = tokens_for(3 * IDLE, busy)
        started = time.monotonic()
        frames = create(busy, **{**SHORT, "max_output_tokens": many}, input=COUNT)
        running = time.monotonic() - started
        assert running > IDLE, f"{many} tokens ran {running:.2f}s, not longer than the idle timeout"
        check_event_stream(frames)
        seconds, closed = closed_after(busy)
    assert IDLE * 0.8 <= seconds <= IDLE + 10 and closed.rcvd.code == 1001, (seconds, closed)

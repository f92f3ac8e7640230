"""Slow clients are cut off (issue 31, finding 9: slowloris), against the real server over raw
sockets: a connection trickling its request head is closed after ``[server] header_read_timeout``,
one trickling its body gets a 408 in the route's protocol shape and is closed after
``body_read_timeout``, one trickling a body no route reads is closed too; meanwhile ordinary
requests are served, and a WebSocket outlives both deadlines."""

from __future__ import annotations

import json
import select
import socket
import threading
import time

import httpx
import pytest
from websockets.sync.client import connect

from kvgate.core.http.slow_clients import BODY_GRACE
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
HEADER, BODY, EVERY = 2.0, 2.0, 0.25  # seconds: the deadlines, and between two trickled bytes
SLACK = 4.0  # a loaded 2-core machine's scheduling delay
PLAIN = {"model": "smollm2", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"server": {"header_read_timeout": HEADER, "body_read_timeout": BODY}, "cache": {"ssd_enabled": False}}
    with ServerProcess(tmp_path_factory.mktemp("slow-clients"), settings) as proc:
        yield proc


def trickle(port: int, head: bytes, piece: bytes, give_up: float = 30.0) -> tuple[float, bytes]:
    """Send ``head``, then ``piece`` byte by byte every EVERY seconds until the server closes the
    connection: ``(seconds from the head until closed, what the server sent)``."""
    conn = socket.create_connection(("127.0.0.1", port))
    received, started = b"", time.monotonic()
    try:
        conn.sendall(head)
        while time.monotonic() - started < give_up:
            try:
                if select.select([conn], [], [], EVERY)[0]:
                    data = conn.recv(65536)
                    if not data:
                        return time.monotonic() - started, received
                    received += data
                    continue
                conn.sendall(piece[:1])
            except OSError:  # reset (a byte sent just as the server closed): closed as well
                return time.monotonic() - started, received
            piece = piece[1:] or piece
        raise AssertionError(f"the server kept a trickling connection open for {give_up}s; it sent {received!r}")
    finally:
        conn.close()


def in_thread(call, *args) -> tuple[threading.Thread, dict]:
    """``call(*args)`` on a thread; its result or exception lands in the dict."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call(*args)
        except BaseException as exc:  # reported by the test, not lost on the thread
            out["result"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_trickled_heads_are_closed_while_a_normal_request_is_served(server):
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    slow = [in_thread(trickle, server.port, head, b"X-Slow: " + b"a" * 200) for _ in range(5)]
    started = time.monotonic()
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=PLAIN, timeout=120)
    assert reply.status_code == 200 and time.monotonic() - started < HEADER + 60
    for thread, out in slow:
        thread.join()
        assert isinstance(out["result"], tuple), out["result"]
        seconds, received = out["result"]
        assert received == b"" and HEADER * 0.9 <= seconds <= HEADER + SLACK, (seconds, received)


@pytest.mark.parametrize("path,shape", [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")])
def test_a_trickled_body_gets_a_408_in_the_protocols_shape_and_is_closed(server, path, shape):
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n").encode()
    seconds, received = trickle(server.port, head, b'{"model": "smollm2", "messages": [' + b" " * 1000)
    assert BODY * 0.9 <= seconds <= BODY + SLACK, seconds
    status_line, _, rest = received.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout" and b"connection: close" in headers.lower(), received
    error = json.loads(body)["error"]
    assert "body_read_timeout" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert (json.loads(body)["type"] == "error") if shape == "anthropic" else error["code"] == "request_timeout"


def test_a_trickled_body_no_route_reads_is_closed(server):
    head = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    seconds, received = trickle(server.port, head, b"x" * 1000)
    assert received.startswith(b"HTTP/1.1 200"), received  # answered at once, then cut off
    assert BODY + BODY_GRACE - 0.5 <= seconds <= BODY + BODY_GRACE + SLACK, seconds


def test_a_prompt_client_keeps_its_connection_across_requests(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        first = client.post("/v1/chat/completions", json=PLAIN)
        time.sleep(HEADER / 2)
        second = client.post("/v1/chat/completions", json=PLAIN)
    assert first.status_code == second.status_code == 200
    assert first.extensions["network_stream"] is second.extensions["network_stream"]


def test_a_websocket_outlives_the_http_deadlines(server):
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        time.sleep(max(HEADER, BODY + BODY_GRACE) + 1)
        socket.send("{not json")
        assert json.loads(socket.recv(timeout=30))["status"] == 400

"""Ctrl-C stops the server whatever its main thread was doing when the signal came.

Python runs a signal handler on the main thread between two bytecodes of the interrupted code. The
server's handler once wrote a log line there: when SIGINT came while the event loop was enqueueing
a request's log line (right after answering it), the handler waited for the log queue's lock that
its own thread held, and the server never exited (tests' teardowns waited 30 s, then killed it).
The handler now only sets uvicorn's flags; the log line and the drain run on the event loop.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import signal
import threading

import httpx
import pytest
import uvicorn

from kvgate.core.http.shutdown import DrainingServer
from tests.harness import STOP_WAIT_S, ServerProcess

STORY = {"messages": [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}],
         "max_tokens": 3000, "stream": True, "ignore_eos": True}


async def no_app(scope, receive, send) -> None:
    """An ASGI app the in-process server is built with and never runs."""


def test_the_signal_handler_takes_no_lock_the_interrupted_code_may_hold():
    """The handler runs on a thread of its own while this one holds the log queue's lock, as the
    interrupted event loop held it: a handler that logs waits here (on the loop's thread, forever)."""
    drained = []
    server = DrainingServer(uvicorn.Config(no_app), lambda: drained.append(True))
    log_queue, kvgate_log = queue.Queue(), logging.getLogger("kvgate")
    handler, level = logging.handlers.QueueHandler(log_queue), kvgate_log.level
    kvgate_log.addHandler(handler)
    kvgate_log.setLevel(logging.INFO)  # as served
    handled = threading.Thread(target=server.handle_exit, args=(signal.SIGINT, None), daemon=True)
    try:
        with log_queue.mutex:  # what the event loop held while it enqueued a request's log line
            handled.start()
            handled.join(5)
            assert not handled.is_alive(), "the signal handler waited for the log queue's lock"
    finally:
        kvgate_log.removeHandler(handler)
        kvgate_log.setLevel(level)
        handled.join(5)
    assert server.should_exit and not drained  # the drain waits for the event loop (shutdown)


@pytest.mark.slow
def test_sigint_right_after_a_response_with_a_stream_left_open_exits_cleanly(tmp_path):
    """SIGINT as a response arrives (its log line is being written then), a stream open and unread."""
    server = ServerProcess(tmp_path).start()
    try:
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=STORY, timeout=60) as story:
            lines = story.iter_lines()  # kept: a dropped iterator closes the stream
            assert next(lines).startswith("data: ")  # generating; nobody reads further
            assert httpx.get(server.base_url + "/v1/models").status_code == 200
            server.proc.send_signal(signal.SIGINT)
            server.proc.wait(timeout=STOP_WAIT_S)  # raises TimeoutExpired when it hangs
    finally:
        server.kill()
    log = server.log()
    assert "Traceback" not in log, log[-3000:]
    assert "stream ended in an error" in log and "Application shutdown complete" in log, log[-2000:]
    # exited by itself, not killed: 0, or 1 where uvicorn re-raised the signal and click printed "Aborted!"
    # (which of the two depends on when the signal lands; both follow the drain above)
    assert server.proc.returncode in (0, 1), server.proc.returncode

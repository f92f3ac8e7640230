"""Logs one line per HTTP request or WebSocket: method, path (with query), status, duration, and
for every 4xx/5xx answer, every stream that ends in an error event and every WebSocket error
frame, the reason (see :mod:`kvgate.core.http.request_outcome`). Failures log at WARNING. A response
the client abandoned before its end (it disconnected) says ``cancelled`` and when the client left.
A WebSocket that carries many requests also gets one line per request (``log_websocket_request``).
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from kvgate.core.http.request_outcome import decoded, error_reason, stream_error_reason

log = logging.getLogger("kvgate.requests")
MAX_ERROR_BODY = 64 * 1024


class _Outcome:
    """What one request sent that the log line needs."""

    def __init__(self):
        self.status = 0
        self.streaming = False
        self.body = b""
        self.reason: Optional[str] = None
        self.ws_errors = 0
        self.complete = False  # the last body chunk was sent
        self.left_after: Optional[float] = None  # seconds in, when the client left before the end

    def received(self, message: dict, elapsed: float) -> None:
        if message.get("type") == "http.disconnect" and not self.complete and self.left_after is None:
            self.left_after = elapsed

    def sent(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            headers = dict((k.lower(), v) for k, v in message.get("headers") or [])
            self.streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
        elif kind == "websocket.accept":
            self.status = 101
        elif kind == "http.response.body":
            self._body(message.get("body") or b"")
            self.complete = not message.get("more_body", False)
        elif kind == "websocket.send":
            reason = self._frame(message.get("text") or message.get("bytes") or "")
            if reason:
                self.ws_errors += 1
                self.reason = reason

    def _body(self, chunk: bytes) -> None:
        if self.streaming:
            self.reason = stream_error_reason(chunk) or self.reason
        elif self.status >= 400 and len(self.body) < MAX_ERROR_BODY:
            self.body += chunk

    @staticmethod
    def _frame(text) -> Optional[str]:
        if '"error"' not in (text if isinstance(text, str) else text.decode("utf-8", "replace")):
            return None
        frame = decoded(text)
        return error_reason(frame) if isinstance(frame, dict) and frame.get("type") in ("error", "response.failed") else None

    def line(self) -> tuple[int, str]:
        """(log level, the text after the duration)."""
        if self.status >= 400:
            text = self.body[:200].decode("utf-8", "replace").replace("\n", " ").strip()
            reason = error_reason(decoded(self.body)) or text or "no body"
            return logging.WARNING, f" {reason}"
        if self.reason and self.ws_errors:
            return logging.WARNING, f" {self.ws_errors} error frame(s), last: {self.reason}"
        if self.reason:
            return logging.WARNING, f" stream ended in an error: {self.reason}"
        if self.left_after is not None:
            return logging.INFO, f" cancelled: the client left after {self.left_after:.3f}s"
        return logging.INFO, ""


class RequestLogMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        outcome = _Outcome()
        path = scope.get("path", "")
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        method = scope.get("method", "WEBSOCKET") if scope["type"] == "http" else "WEBSOCKET"

        async def logged_send(message):
            outcome.sent(message)
            await send(message)

        async def logged_receive():
            message = await receive()
            outcome.received(message, time.monotonic() - started)
            return message

        try:
            await self.app(scope, logged_receive, logged_send)
        finally:
            level, tail = outcome.line()
            log.log(level, "%s %s %s %.3fs%s", method, path, outcome.status or "-", time.monotonic() - started, tail)


def log_websocket_request(path: str, name: str, outcome: str, seconds: float, detail: str = "",
                          failed: bool = False) -> None:
    """The line of one request carried by a WebSocket (``name``: the frame type), like an HTTP
    request's: ``outcome`` is a status word or code, ``detail`` what else there is to say."""
    log.log(logging.WARNING if failed else logging.INFO, "WEBSOCKET %s %s %s %.3fs%s", path, name, outcome, seconds,
            f" {detail}" if detail else "")

"""Logs one line per HTTP request or WebSocket: method, path (with query), status, duration, and
for every 4xx/5xx answer, every stream that ends in an error event and every WebSocket error
frame, the reason (see :mod:`kvgate.core.request_outcome`). Failures log at WARNING."""

from __future__ import annotations

import logging
import time
from typing import Optional

from kvgate.core.request_outcome import decoded, error_reason, stream_error_reason

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

        try:
            await self.app(scope, receive, logged_send)
        finally:
            level, tail = outcome.line()
            log.log(level, "%s %s %s %.3fs%s", method, path, outcome.status or "-", time.monotonic() - started, tail)

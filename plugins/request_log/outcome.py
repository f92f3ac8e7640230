"""What one HTTP request or WebSocket sent and received that its log line needs."""

from __future__ import annotations

import logging
from typing import Optional

from kvgate.plugins.request_log.request_outcome import decoded, error_reason, stream_error_reason

MAX_ERROR_BODY = 64 * 1024


class Outcome:
    """Fed every message sent and received; :meth:`line` says how it went."""

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

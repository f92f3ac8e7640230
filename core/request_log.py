"""Logs one line per HTTP request or WebSocket: method, path (with query), status, duration."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("kvgate.requests")


class RequestLogMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = {"code": 0}
        path = scope.get("path", "")
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        method = scope.get("method", "WEBSOCKET") if scope["type"] == "http" else "WEBSOCKET"

        async def logged_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            elif message["type"] == "websocket.accept":
                status["code"] = 101
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            log.info("%s %s %s %.3fs", method, path, status["code"] or "-", time.monotonic() - started)

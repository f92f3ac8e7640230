"""Plugin: the request log (``[server] log_requests``, on by default), an ASGI wrapper
(``register_asgi_wrappers``) around the whole app.

It logs one line per HTTP request or WebSocket to the ``kvgate.requests`` logger: method, path (with
query), status, duration, and for every 4xx/5xx answer, every stream that ends in an error event and
every WebSocket error frame, the reason (see :mod:`.request_outcome`). Failures log at WARNING. A
response the client abandoned before its end (it disconnected) says ``cancelled`` and when the
client left. With the plugin disabled or ``log_requests = false``, nothing is logged per request.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.request_log.outcome import Outcome

log = logging.getLogger("kvgate.requests")


def request_path(scope) -> str:
    path = scope.get("path", "")
    if scope.get("query_string"):
        path += "?" + scope["query_string"].decode("latin-1")
    return path


class RequestLogMiddleware:
    """Wraps an ASGI app; logs each HTTP request's and WebSocket's line when it ends."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        outcome = Outcome()
        path = request_path(scope)  # before the app sees the scope
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


def request_log_for(ctx) -> Optional[type[RequestLogMiddleware]]:
    """The wrapper when ``[server] log_requests`` is on, else None."""
    return RequestLogMiddleware if ctx.config.server.log_requests else None


@hookimpl
def register_asgi_wrappers(register):
    register("request_log", request_log_for)

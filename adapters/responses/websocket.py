"""Responses over WebSocket: ``GET /v1/responses`` with ``Upgrade: websocket``.

Client text frames: ``{"type": "response.create", ...the HTTP create body...}``, handled one at a
time; other frame types (``response.processed``, ...) are ignored. Server frames: the SSE event
payloads, one JSON object per text frame. ``generate: false`` is a warm-up: the prompt is
prefilled and the reply is ``response.created`` + ``response.completed`` with empty output.
``previous_response_id`` resolves against this connection's last response (kept even with
``store: false``), then the store. A follow-up frame without a ``tools`` field keeps the tools of
the response it continues (Codex's follow-up after a tool call holds only the tool output and
``previous_response_id``), so its prompt extends the previous one and the fence still enforces
them; tools announced by ``additional_tools`` input items stay in force along any chain. Errors
are frames, never a dropped socket::

    {"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}

Over ``server.max_websocket_connections`` open sockets, a new one gets an error frame with
code ``websocket_connection_limit_reached`` and is closed.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from litestar import WebSocket, websocket

from kvgate.core.errors import KvgateError
from kvgate.adapters.responses.http_routes import both
from kvgate.adapters.responses.store import ResponseStore
from kvgate.adapters.responses.ws_connection import Connection, error_frame

log = logging.getLogger("kvgate.responses")


class ConnectionLimit:
    def __init__(self, limit: int):
        self.limit, self.open = limit, 0

    def acquire(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


def websocket_handler(ctx: Any, store: ResponseStore, limit: Optional[ConnectionLimit] = None):
    limit = limit or ConnectionLimit(ctx.config.server.max_websocket_connections)

    @websocket(both("/responses"))
    async def responses_socket(socket: WebSocket) -> None:
        await socket.accept()
        if not limit.acquire():
            full = KvgateError(f"Too many open WebSocket connections (limit {limit.limit}); reconnect later.",
                               code="websocket_connection_limit_reached")
            full.status, full.kind = 429, "rate_limit_error"
            await Connection(ctx, store, socket).send(error_frame(full))
            await socket.close(code=1013)
            return
        try:
            await Connection(ctx, store, socket).serve()
        except Exception:  # the socket is already gone or broken; nothing to send it
            log.exception("responses websocket: connection ended with an error")
        finally:
            limit.release()

    return responses_socket

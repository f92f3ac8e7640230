"""Responses over WebSocket: ``GET /v1/responses`` with ``Upgrade: websocket``.

Client text frames: ``{"type": "response.create", ...the HTTP create body...}``, handled one at a
time per lane: an optional top-level ``stream_id`` names the lane, lanes run at the same time and
every frame of a lane's response carries its ``stream_id`` (:mod:`.ws_lanes`); frames without one
share the default lane. Other frame types (``response.processed``, ...) are ignored. Server frames:
the SSE event payloads, one JSON object per text frame. ``generate: false`` is a warm-up: the
prompt is prefilled and the reply is ``response.created`` + ``response.completed`` with empty
output. ``previous_response_id`` resolves against the last response of this connection's recent
lanes (kept even with ``store: false``; a new lane may fork from another lane's), then the store.
A follow-up frame without a ``tools`` field keeps the tools of the response it continues (Codex's
follow-up after a tool call holds only the tool output and ``previous_response_id``), so its
prompt extends the previous one and the fence still enforces them; tools announced by
``additional_tools`` input items stay in force along any chain. Errors are frames, never a
dropped socket (a lane's carry its ``stream_id``)::

    {"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}

Over ``server.max_websocket_connections`` open sockets of one tenant (or
``max_websocket_connections_total`` of all, :mod:`.ws_limits`), a new one gets an error frame with
code ``websocket_connection_limit_reached`` and is closed. A socket with no client frame and no
running response for ``server.websocket_idle_timeout`` seconds is closed (:mod:`.ws_connection`).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from litestar import WebSocket, websocket

from kvgate.core.errors import KvgateError
from kvgate.core.tenants import tenant_of
from kvgate.adapters.responses.http_routes import both
from kvgate.adapters.responses.store import ResponseStore
from kvgate.adapters.responses.ws_connection import Connection, error_frame
from kvgate.adapters.responses.ws_limits import ConnectionLimits

log = logging.getLogger("kvgate.responses")


def websocket_handler(ctx: Any, store: ResponseStore, limits: Optional[ConnectionLimits] = None):
    server = ctx.config.server
    limits = limits or ConnectionLimits(server.max_websocket_connections, server.max_websocket_connections_total)

    @websocket(both("/responses"))
    async def responses_socket(socket: WebSocket) -> None:
        await socket.accept()
        tenant = tenant_of(socket).name
        refusal = limits.acquire(tenant)
        if refusal is not None:
            full = KvgateError(refusal, code="websocket_connection_limit_reached")
            full.status, full.kind = 429, "rate_limit_error"
            await Connection(ctx, store, socket).send(error_frame(full))
            await socket.close(code=1013)
            return
        try:
            await Connection(ctx, store, socket).serve()
        except Exception:  # the socket is already gone or broken; nothing to send it
            log.exception("responses websocket: connection ended with an error")
        finally:
            limits.release(tenant)

    return responses_socket

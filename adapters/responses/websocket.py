"""Responses over WebSocket: ``GET /v1/responses`` with ``Upgrade: websocket``.

Client text frames: ``{"type": "response.create", ...the HTTP create body...}``, handled one at a
time; other frame types (``response.processed``, ...) are ignored. Server frames: the SSE event
payloads, one JSON object per text frame. ``generate: false`` is a warm-up: the prompt is
prefilled and the reply is ``response.created`` + ``response.completed`` with empty output.
``previous_response_id`` resolves against this connection's last response (kept even with
``store: false``), then the store. Errors are frames, never a dropped socket::

    {"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}

Over ``server.max_websocket_connections`` open sockets, a new one gets an error frame with
code ``websocket_connection_limit_reached`` and is closed.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Optional

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect

from kvgate.core.errors import ContextLengthExceeded, InvalidRequest, KvgateError
from kvgate.adapters.responses.http_routes import CACHE_KEY_HEADER, both
from kvgate.adapters.responses.run import HEARTBEAT, begin, new_run, parse_call
from kvgate.adapters.responses.store import ResponseStore, StoredResponse

log = logging.getLogger("kvgate.responses")


def error_frame(exc: KvgateError) -> dict[str, Any]:
    return {"type": "error", "status": exc.status,
            "error": {"type": exc.kind, "code": exc.code, "message": exc.message, "param": exc.param}}


class Connection:
    """One socket: serial ``response.create`` requests and the memory of the last response."""

    def __init__(self, ctx: Any, store: ResponseStore, socket: WebSocket):
        self.ctx, self.store, self.socket = ctx, store, socket
        self.last: dict[str, StoredResponse] = {}

    async def send(self, frame: dict[str, Any]) -> None:
        await self.socket.send_text(json.dumps(frame, ensure_ascii=False, separators=(",", ":")))

    async def serve(self) -> None:
        while True:
            try:
                text = await self.socket.receive_text()
            except WebSocketDisconnect:
                return
            try:
                await self.handle(text)
            except KvgateError as exc:
                await self.send(error_frame(exc))
            except WebSocketDisconnect:
                return
            except Exception:
                log.exception("responses websocket: request failed")
                await self.send(error_frame(KvgateError("Internal server error.")))

    async def handle(self, text: str) -> None:
        try:
            frame = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"Frame is not valid JSON: {exc}") from None
        if not isinstance(frame, dict):
            raise InvalidRequest("Frame must be a JSON object.")
        if frame.get("type") == "response.create":
            body = {key: value for key, value in frame.items() if key != "type"}
            await self.create(body)

    async def create(self, body: dict[str, Any]) -> None:
        call = parse_call(self.ctx, self.store, body, header_cache_key=self.socket.headers.get(CACHE_KEY_HEADER),
                          local=self.last)
        if body.get("generate") is False:
            return await self.warm(call)
        run = await begin(self.ctx, self.store, call, streaming=True)
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                if event is not HEARTBEAT:
                    await self.send(event)
        self.last = {run.record.response["id"]: run.record}

    async def warm(self, call) -> None:
        run = new_run(self.ctx, self.store, call)
        try:
            usage = await self.ctx.pipeline.warm(call.chat)
            frames = run.renderer.start(in_progress=False) + run.renderer.complete_empty(usage)
        except ContextLengthExceeded as exc:
            frames = run.renderer.start(in_progress=False) + run.renderer.fail(exc.code, exc.message)
        for frame in frames:
            await self.send(frame)
        record = run.keep(with_output=False)
        self.last = {record.response["id"]: record}


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

"""One ``response.create`` answered on a lane of a Responses WebSocket: its run, its frames (each
carrying the lane's ``stream_id`` when it has one; the default lane's frames are unchanged), and
its request log line.

Each ``response.create`` gets its own request log line (the socket has one too): the response's
status (``completed``, ``incomplete``, ``failed``), an error frame's status, or ``cancelled`` with
the time at which the client left; a lane's line names its ``stream_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Optional

from litestar.exceptions import WebSocketDisconnect

from kvgate.core.errors import ContextLengthExceeded, KvgateError
from kvgate.core.http.request_hints import apply_hints
from kvgate.core.tenants import tenant_of
from kvgate.core.types import Usage
from kvgate.adapters.responses.http_routes import CACHE_KEY_HEADER
from kvgate.adapters.responses.run import HEARTBEAT, begin, new_run, parse_call
from kvgate.adapters.responses.ws_lanes import LaneName

log = logging.getLogger("kvgate.responses")
request_log = logging.getLogger("kvgate.requests")  # beside the HTTP request lines
GONE = (WebSocketDisconnect, OSError)  # uvicorn raises ClientDisconnected (an OSError) on a send


def log_websocket_request(path: str, name: str, outcome: str, seconds: float, detail: str = "",
                          failed: bool = False) -> None:
    """The line of one request carried by a WebSocket (``name``: the frame type), like an HTTP
    request's: ``outcome`` is a status word or code, ``detail`` what else there is to say."""
    request_log.log(logging.WARNING if failed else logging.INFO, "WEBSOCKET %s %s %s %.3fs%s", path, name, outcome,
                    seconds, f" {detail}" if detail else "")


def error_frame(exc: KvgateError) -> dict[str, Any]:
    return {"type": "error", "status": exc.status,
            "error": {"type": exc.kind, "code": exc.code, "message": exc.message, "param": exc.param}}


class LaneRequest:
    """One ``response.create`` on ``lane`` of ``connection`` (a :class:`.ws_connection.Connection`)."""

    def __init__(self, connection: Any, lane: LaneName):
        self.connection, self.lane = connection, lane
        self.ctx, self.store, self.socket = connection.ctx, connection.store, connection.socket
        self.response: Optional[dict[str, Any]] = None  # the Response object being answered

    async def send(self, frame: dict[str, Any]) -> None:
        await self.connection.send(frame if self.lane is None else {**frame, "stream_id": self.lane})

    async def answer(self, item: Any) -> bool:
        """Answer a create body, or send a queued error in its turn; False when the client is gone."""
        try:
            try:
                if isinstance(item, KvgateError):
                    raise item
                await self.create(item)
            except KvgateError as exc:
                await self.send(error_frame(exc))
            except GONE:
                raise
            except Exception:
                log.exception("responses websocket: request failed")
                await self.send(error_frame(KvgateError("Internal server error.")))
        except GONE:
            return False
        except asyncio.CancelledError:
            log.info("responses websocket: client left; request cancelled")
            raise
        return True

    async def create(self, body: dict[str, Any]) -> None:
        """Answer one ``response.create`` and log its line."""
        started = time.monotonic()
        try:
            await self._create(body)
        except KvgateError as exc:
            self.log_line(started, str(exc.status), exc.code or exc.message, failed=True)
            raise
        except (asyncio.CancelledError, *GONE):
            left = (self.connection.left_at or time.monotonic()) - started
            self.log_line(started, "cancelled", f"the client left after {left:.3f}s")
            raise
        except Exception:
            self.log_line(started, "500", "internal error", failed=True)
            raise
        status = self.response["status"] if self.response is not None else "-"
        self.log_line(started, status, self._outcome_detail(), failed=status == "failed")

    def log_line(self, started: float, outcome: str, detail: str, failed: bool = False) -> None:
        named = f"{self.response['id']} {detail}" if self.response is not None else detail
        if self.lane is not None:
            named = f"stream_id={self.lane} {named}"
        log_websocket_request(self.socket.scope.get("path", ""), "response.create", outcome,
                              time.monotonic() - started, named.strip(), failed)

    def _outcome_detail(self) -> str:
        response = self.response or {}
        error, incomplete = response.get("error") or {}, response.get("incomplete_details") or {}
        return str(error.get("code") or error.get("message") or incomplete.get("reason") or "")

    async def _create(self, body: dict[str, Any]) -> None:
        warm_up = body.get("generate") is False
        call = parse_call(self.ctx, self.store, body, header_cache_key=self.socket.headers.get(CACHE_KEY_HEADER),
                          local=self.connection.memory.by_id(), tenant=tenant_of(self.socket), warm_up=warm_up,
                          inherit_tools=True)
        apply_hints(call.chat, self.socket.headers)
        log.info("responses websocket: %s, %d messages, previous_response_id %s, stream_id %s",
                 "warm-up" if warm_up else "response.create", len(call.chat.messages), call.previous_response_id,
                 self.lane)
        if warm_up:
            return await self.warm(call)
        run = await begin(self.ctx, self.store, call, streaming=True)
        self.response = run.renderer.response
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                if event is not HEARTBEAT:
                    await self.send(event)
        self.connection.memory.remember(self.lane, run.record)

    async def warm(self, call) -> None:
        run = new_run(self.ctx, self.store, call)
        self.response = run.renderer.response
        for frame in run.renderer.start(in_progress=False):  # at once: the prefill may take a while
            await self.send(frame)
        try:  # a warm-up with no input yet (Codex's, at start-up) has nothing to compute
            usage = await self.ctx.pipeline.warm(call.chat) if call.chat.messages else Usage()
            frames = run.renderer.complete_empty(usage)
        except ContextLengthExceeded as exc:
            frames = run.renderer.fail(exc.code, exc.message)
        for frame in frames:
            await self.send(frame)
        self.connection.memory.remember(self.lane, run.keep(with_output=False))

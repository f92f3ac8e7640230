"""One Responses WebSocket connection: serial ``response.create`` requests, the memory of the last
response, and cancellation of the running request when the client goes away.

A reader task drains incoming frames into an inbox for the whole life of the socket, so a
disconnect is noticed even during a long prefill (when nothing is being sent) and the work
for it is cancelled instead of running on for nobody. The inbox holds at most
:data:`MAX_PENDING_FRAMES` frames and ``[server] max_body_bytes`` bytes waiting: a frame past
either is answered with an error frame and dropped, so a client cannot queue memory without end.
A socket that sends no frame for ``[server] websocket_idle_timeout`` seconds while no response
runs is closed with code 1001 (going away) and a reason naming the key: the clock starts when the
last frame arrived or the last response ended, never during one.

Each ``response.create`` gets its own request log line (the socket has one too): the response's
status (``completed``, ``incomplete``, ``failed``), an error frame's status, or ``cancelled`` with
the time at which the client left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Optional

from litestar import WebSocket
from litestar.exceptions import WebSocketDisconnect

from kvgate.core.http.body import BodyLimits, parse_off_loop
from kvgate.core.http.client_gone import unless_gone_first
from kvgate.core.errors import ContextLengthExceeded, InvalidRequest, KvgateError
from kvgate.core.http.request_hints import apply_hints
from kvgate.core.http.routing import json_text
from kvgate.core.tenants import tenant_of
from kvgate.core.types import Usage
from kvgate.adapters.responses.http_routes import CACHE_KEY_HEADER
from kvgate.adapters.responses.run import HEARTBEAT, begin, new_run, parse_call
from kvgate.adapters.responses.store import ResponseStore, StoredResponse

log = logging.getLogger("kvgate.responses")
request_log = logging.getLogger("kvgate.requests")  # beside the HTTP request lines
GONE = (WebSocketDisconnect, OSError)  # uvicorn raises ClientDisconnected (an OSError) on a send
MAX_PENDING_FRAMES = 8
IDLE_CLOSE_CODE = 1001  # going away: the server ends a socket that stayed unused


def log_websocket_request(path: str, name: str, outcome: str, seconds: float, detail: str = "",
                          failed: bool = False) -> None:
    """The line of one request carried by a WebSocket (``name``: the frame type), like an HTTP
    request's: ``outcome`` is a status word or code, ``detail`` what else there is to say."""
    request_log.log(logging.WARNING if failed else logging.INFO, "WEBSOCKET %s %s %s %.3fs%s", path, name, outcome,
                    seconds, f" {detail}" if detail else "")


def error_frame(exc: KvgateError) -> dict[str, Any]:
    return {"type": "error", "status": exc.status,
            "error": {"type": exc.kind, "code": exc.code, "message": exc.message, "param": exc.param}}


class Connection:
    """One socket: serial ``response.create`` requests and the memory of the last response."""

    def __init__(self, ctx: Any, store: ResponseStore, socket: WebSocket):
        self.ctx, self.store, self.socket = ctx, store, socket
        self.last: dict[str, StoredResponse] = {}
        self.inbox: asyncio.Queue[Optional[str]] = asyncio.Queue()
        self.gone = asyncio.Event()
        self.left_at: Optional[float] = None  # time.monotonic() when the client went away
        self.response: Optional[dict[str, Any]] = None  # the Response object of the request being answered
        self.limits = BodyLimits.of(ctx.config.server)
        self.pending_bytes = 0  # of the frames waiting in the inbox
        self.idle_timeout = ctx.config.server.websocket_idle_timeout  # 0: never closed for idleness

    async def send(self, frame: dict[str, Any]) -> None:
        await self.socket.send_text(json_text(frame))

    async def _read_frames(self) -> None:
        try:
            while True:
                text = await self.socket.receive_text()
                if self.inbox.qsize() >= MAX_PENDING_FRAMES or self.pending_bytes + len(text) > self.limits.max_bytes:
                    await self.send(error_frame(InvalidRequest(
                        f"Too many frames waiting on this socket (at most {MAX_PENDING_FRAMES}, "
                        f"{self.limits.max_bytes} bytes); this one was dropped: wait for a response before "
                        "sending more.", code="too_many_pending_requests")))
                    continue
                self.pending_bytes += len(text)
                await self.inbox.put(text)
        except Exception:  # a disconnect, or a frame that cannot be read as text: the socket is done
            self.left_at = time.monotonic()
            self.gone.set()
            await self.inbox.put(None)

    async def serve(self) -> None:
        reader = asyncio.create_task(self._read_frames())
        try:
            while (text := await self._next_frame()) is not None:
                self.pending_bytes -= len(text)
                if not await self._run_unless_gone(self._answer(text)):
                    return
        finally:
            reader.cancel()

    async def _next_frame(self) -> Optional[str]:
        """The next frame's text; None once the client left, or stayed idle past ``idle_timeout``
        (then the socket is closed here)."""
        if not self.idle_timeout:
            return await self.inbox.get()
        try:
            return await asyncio.wait_for(self.inbox.get(), self.idle_timeout)
        except asyncio.TimeoutError:
            await self._close_idle()
            return None

    async def _close_idle(self) -> None:
        reason = f"idle for {self.idle_timeout:g} s ([server] websocket_idle_timeout)"
        log.info("responses websocket: closed after %s", reason)
        with contextlib.suppress(*GONE, RuntimeError):  # the client may have left at the same moment
            await self.socket.close(code=IDLE_CLOSE_CODE, reason=reason)

    async def _run_unless_gone(self, work) -> bool:
        """Run ``work``; if the client disconnects first, cancel it. False when the socket is gone."""
        task = await unless_gone_first(work, self.gone.wait())
        if task.cancelled():
            log.info("responses websocket: client left; request cancelled")
            return False
        return task.exception() is None and task.result()

    async def _answer(self, text: str) -> bool:
        """Handle one frame; False when the client is gone (sending to it failed)."""
        try:
            try:
                await self.handle(text)
            except KvgateError as exc:
                await self.send(error_frame(exc))
            except GONE:
                raise
            except Exception:
                log.exception("responses websocket: request failed")
                await self.send(error_frame(KvgateError("Internal server error.")))
        except GONE:
            return False
        return True

    async def handle(self, text: str) -> None:
        frame = await parse_off_loop(text.encode("utf-8", "surrogatepass"), self.limits, "Frame")
        if frame.get("type") == "response.create":
            body = {key: value for key, value in frame.items() if key != "type"}
            await self.create(body)

    async def create(self, body: dict[str, Any]) -> None:
        """Answer one ``response.create`` and log its line."""
        started, self.response = time.monotonic(), None
        try:
            await self._create(body)
        except KvgateError as exc:
            self._log_request(started, str(exc.status), exc.code or exc.message, failed=True)
            raise
        except (asyncio.CancelledError, *GONE):
            left = (self.left_at or time.monotonic()) - started
            self._log_request(started, "cancelled", f"the client left after {left:.3f}s")
            raise
        except Exception:
            self._log_request(started, "500", "internal error", failed=True)
            raise
        status = self.response["status"] if self.response is not None else "-"
        self._log_request(started, status, self._outcome_detail(), failed=status == "failed")

    def _log_request(self, started: float, outcome: str, detail: str, failed: bool = False) -> None:
        named = f"{self.response['id']} {detail}" if self.response is not None else detail
        log_websocket_request(self.socket.scope.get("path", ""), "response.create", outcome,
                              time.monotonic() - started, named.strip(), failed)

    def _outcome_detail(self) -> str:
        response = self.response or {}
        error, incomplete = response.get("error") or {}, response.get("incomplete_details") or {}
        return str(error.get("code") or error.get("message") or incomplete.get("reason") or "")

    async def _create(self, body: dict[str, Any]) -> None:
        warm_up = body.get("generate") is False
        call = parse_call(self.ctx, self.store, body, header_cache_key=self.socket.headers.get(CACHE_KEY_HEADER),
                          local=self.last, tenant=tenant_of(self.socket), warm_up=warm_up, inherit_tools=True)
        apply_hints(call.chat, self.socket.headers)
        log.info("responses websocket: %s, %d messages, previous_response_id %s",
                 "warm-up" if warm_up else "response.create", len(call.chat.messages), call.previous_response_id)
        if warm_up:
            return await self.warm(call)
        run = await begin(self.ctx, self.store, call, streaming=True)
        self.response = run.renderer.response
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                if event is not HEARTBEAT:
                    await self.send(event)
        self.last = {run.record.response["id"]: run.record}

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
        record = run.keep(with_output=False)
        self.last = {record.response["id"]: record}

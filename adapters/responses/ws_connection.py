"""One Responses WebSocket connection: the reader of its frames, its lanes (:mod:`.ws_lanes`), the
memory of their last responses, and cancellation of every lane's running request when the client
goes away.

A reader task reads frames for the whole life of the socket and hands each ``response.create`` to
its lane, so a disconnect is noticed even during a long prefill (when nothing is being sent) and
the work for it is cancelled instead of running on for nobody. A frame that cannot be parsed is
answered in its turn on the default lane; other client frame types are ignored. Frames past a
lane's pending limit, the bytes limit, or the lane limit are answered with an error frame and
dropped, so a client cannot queue memory without end. A socket that sends no frame for
``[server] websocket_idle_timeout`` seconds while no response runs is closed with code 1001 (going
away) and a reason naming the key: the clock starts when the last frame arrived or the last
response ended, never during one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Optional

from litestar import WebSocket

from kvgate.core.errors import KvgateError
from kvgate.core.http.body import BodyLimits, parse_off_loop
from kvgate.core.http.routing import json_text
from kvgate.adapters.responses.store import ResponseStore
from kvgate.adapters.responses.ws_lanes import (MAX_PENDING_FRAMES, LaneMemory, LaneName, Lanes, lane_of,
                                                too_many_pending)
from kvgate.adapters.responses.ws_request import (GONE, LaneRequest, error_frame,  # noqa: F401 (re-exported)
                                                  log_websocket_request)

log = logging.getLogger("kvgate.responses")
IDLE_CLOSE_CODE = 1001  # going away: the server ends a socket that stayed unused
__all__ = ["Connection", "MAX_PENDING_FRAMES", "error_frame", "log_websocket_request"]


class Connection:
    """One socket: its lanes of ``response.create`` requests and the memory of their responses."""

    def __init__(self, ctx: Any, store: ResponseStore, socket: WebSocket):
        self.ctx, self.store, self.socket = ctx, store, socket
        server = ctx.config.server
        self.limits = BodyLimits.of(server)
        self.lanes = Lanes(self._answer, server.max_websocket_lanes, self.limits.max_bytes)
        self.memory = LaneMemory(server.max_websocket_lanes)
        self.gone = asyncio.Event()
        self.left_at: Optional[float] = None  # time.monotonic() when the client went away
        self.activity = asyncio.Event()  # a frame came, a response ended, or the client left
        self.idle_timeout = server.websocket_idle_timeout  # 0: never closed for idleness
        self.sending = asyncio.Lock()  # lanes send at the same time; a frame goes out whole

    async def send(self, frame: dict[str, Any]) -> None:
        async with self.sending:
            await self.socket.send_text(json_text(frame))

    def _mark_gone(self) -> None:
        if not self.gone.is_set():
            self.left_at = time.monotonic()
            self.gone.set()
        self.activity.set()

    async def _answer(self, lane: LaneName, item: Any) -> bool:
        answered = await LaneRequest(self, lane).answer(item)
        self.activity.set()
        if not answered:
            self._mark_gone()
        return answered

    async def _read_frames(self) -> None:
        while True:
            try:
                text = await self.socket.receive_text()
            except Exception:  # a disconnect, or a frame that cannot be read as text: the socket is done
                return self._mark_gone()
            self.activity.set()
            try:
                await self._dispatch(text)
            except GONE:
                return self._mark_gone()

    async def _dispatch(self, text: str) -> None:
        """Queue a frame on its lane, or answer at once why it was dropped."""
        if not self.lanes.room_for(len(text)):
            return await self.send(error_frame(too_many_pending(self.limits.max_bytes)))
        lane: LaneName = None
        try:
            frame = await parse_off_loop(text.encode("utf-8", "surrogatepass"), self.limits, "Frame")
            if frame.get("type") != "response.create":
                return
            lane = lane_of(frame)
            item: Any = {key: value for key, value in frame.items() if key not in ("type", "stream_id")}
        except KvgateError as exc:
            item = exc  # answered in its turn, as the frame would have been
        refusal = self.lanes.submit(lane, item, len(text))
        if refusal is not None:
            await LaneRequest(self, lane).send(error_frame(refusal))

    async def serve(self) -> None:
        reader = asyncio.create_task(self._read_frames())
        try:
            await self._until_gone_or_idle()
        finally:
            reader.cancel()
            await self.lanes.cancel_all()

    async def _until_gone_or_idle(self) -> None:
        """Return once the client left, or stayed idle past ``idle_timeout`` (then the socket is
        closed here)."""
        while not self.gone.is_set():
            self.activity.clear()
            try:
                await asyncio.wait_for(self.activity.wait(), self.idle_timeout or None)
            except asyncio.TimeoutError:
                if not self.lanes.tasks:
                    return await self._close_idle()

    async def _close_idle(self) -> None:
        reason = f"idle for {self.idle_timeout:g} s ([server] websocket_idle_timeout)"
        log.info("responses websocket: closed after %s", reason)
        with contextlib.suppress(*GONE, RuntimeError):  # the client may have left at the same moment
            await self.socket.close(code=IDLE_CLOSE_CODE, reason=reason)

"""A compaction's summary pass as it streams: the ``compaction`` item's ``output_item.added`` at
once, progress events while the served model writes the summary, and the summary at the end (the
caller sends the item's ``output_item.done``, once it has built the item).

The summary itself is not streamed (the item is opaque), yet the client must not sit in silence
while it is written: on a slow machine the pass can outlast a client's idle timeout (Codex's
``stream_idle_timeout_ms``, 300 s by default, counts parsed events only, not SSE comments). So
while the pass runs it sends, at most every :data:`PROGRESS_SECONDS`:

- ``response.compaction.compacting`` ``{item_id, output_index}`` (the SDK's
  ``ResponseCompactionCompactingEvent``) when the model has sampled summary text since the last
  progress event;
- ``response.in_progress`` (the Response so far) when it has not: a prefill, a busy batch;
- :data:`HEARTBEAT` (an SSE comment, nothing on a WebSocket) for the pipeline's prefill heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Optional

from kvgate.core.errors import KvgateError
from kvgate.core.types import ChatRequest, Finished, Heartbeat, TextDelta, Usage
from kvgate.adapters.responses import objects

HEARTBEAT = None  # yielded while a long prefill runs: an SSE comment, nothing on a WebSocket
PROGRESS_SECONDS = 2.0
TICK = object()  # from ticking(): no event came for its interval


async def ticking(events: AsyncIterator[Any], seconds: float) -> AsyncIterator[Any]:
    """``events`` as they come, and :data:`TICK` after each ``seconds`` in which none came."""
    pending: Optional[asyncio.Future] = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(events.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                yield TICK
                continue
            finished, pending = pending, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        if pending is not None:  # the consumer left mid-wait: stop the source where it waits
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending


class SummaryPass:
    """One summary request run on ``pipeline``, its events rendered through ``renderer`` (a
    :class:`.render.StreamRenderer`); ``summary`` and ``usage`` are set when :meth:`events` ends."""

    def __init__(self, pipeline: Any, chat: ChatRequest, renderer: Any, seconds: float = PROGRESS_SECONDS):
        self.pipeline, self.chat, self.renderer, self.seconds = pipeline, chat, renderer, seconds
        self.item_id = objects.new_id("cmp")
        self.output_index = len(renderer.response["output"])
        self.summary, self.usage = "", Usage()
        self.stream: Any = None
        self.first: Any = None

    async def open(self) -> None:
        """Start the pass and take its first event: a conversation over the context raises
        ``ContextLengthExceeded`` here, before any event is sent."""
        self.stream = self.pipeline.stream(self.chat)
        self.first = await self.stream.__anext__()

    async def _resumed(self) -> AsyncIterator[Any]:
        if self.stream is None:
            await self.open()
        yield self.first
        async for event in self.stream:
            yield event

    async def events(self) -> AsyncIterator[Optional[dict[str, Any]]]:
        """The item's ``added``, then progress until the summary is written; a failed pass raises
        :class:`KvgateError` (``ContextLengthExceeded`` for a conversation over the context)."""
        shell = {"type": "compaction", "id": self.item_id, "encrypted_content": ""}
        for event in self.renderer.item_added(shell):
            yield event
        pieces: list[str] = []
        events = self._resumed()
        try:
            async for event in self._progress(ticking(events, self.seconds / 2), pieces):
                yield event
        finally:
            await events.aclose()
            if self.stream is not None:
                await self.stream.aclose()
        self.summary = "".join(pieces).strip()

    async def _progress(self, events: AsyncIterator[Any], pieces: list[str]) -> AsyncIterator[Optional[dict]]:
        last, sampled = time.monotonic(), False
        async with contextlib.aclosing(events):
            async for event in events:
                if isinstance(event, Finished):
                    self._finish(event)
                    return
                if isinstance(event, TextDelta):
                    pieces.append(event.text)
                    sampled = True
                elif isinstance(event, Heartbeat):
                    yield HEARTBEAT
                if time.monotonic() - last >= self.seconds:  # checked on each event and TICK
                    for wire in self.renderer.still_working(self._compacting() if sampled else None):
                        yield wire
                    last, sampled = time.monotonic(), False
        raise KvgateError("The compaction summary ended without a result.")

    def _finish(self, finished: Finished) -> None:
        if finished.reason in ("error", "cancelled"):
            raise KvgateError(f"The compaction summary could not be generated ({finished.reason}).")
        self.usage = finished.usage

    def _compacting(self) -> dict[str, Any]:
        return {"type": "response.compaction.compacting", "item_id": self.item_id, "output_index": self.output_index}

"""``SequenceRun``: one sequence driven through the engine from the event loop.

The one loop every consumer of the engine uses (the pipeline's stream and warm-up, the gRPC
worker). The engine thread hands the sequence's messages to :meth:`SequenceRun.deliver`; iterating
the run gives them back on the event loop, in order, up to the ``SequenceDone``. A consumer that
leaves the ``with`` block before that (a client disconnect, a cancelled task, an error) cancels the
sequence in the engine, so it stops computing for nobody.

    with SequenceRun(engine, heartbeat_s=5.0) as run:
        run.submit(Sequence(..., deliver=run.deliver))
        async for message in run:  # None: heartbeat_s passed without a message
            ...
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Callable, Optional

from kvgate.core.engine.sequence import EngineMessage, Sequence, SequenceDone


class LoopInbox:
    """Messages from the engine thread to one event loop's queues, handed over in batches: the first
    message after a hand-over schedules one wake-up of the loop (a write to its self-pipe, ~0.1 ms
    on a busy machine), the others of the same decode step ride along. Each queue gets its messages
    in the order they were put. One per loop (:meth:`of`)."""

    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox]" = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue, EngineMessage]] = []

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "LoopInbox":
        """The inbox of ``loop`` (made on first use; called on the loop's own thread)."""
        inbox = cls._by_loop.get(loop)
        if inbox is None:
            inbox = cls._by_loop[loop] = cls(loop)
        return inbox

    def put(self, queue: asyncio.Queue, message: EngineMessage) -> None:
        """Called on any thread: ``message`` reaches ``queue`` on the loop."""
        with self._lock:
            self._pending.append((queue, message))
            wake = len(self._pending) == 1
        if wake:
            self.loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for queue, message in pending:
            queue.put_nowait(message)


class SequenceRun:
    def __init__(self, engine, heartbeat_s: Optional[float] = None):
        """``engine``: what the sequence is submitted to and cancelled in. ``heartbeat_s``: the
        longest wait for a message before the iteration gives ``None`` instead (None: no limit)."""
        self.engine = engine
        self.heartbeat_s = heartbeat_s
        self.loop = asyncio.get_running_loop()
        self.inbox = LoopInbox.of(self.loop)
        self.queue: asyncio.Queue[EngineMessage] = asyncio.Queue()
        self.seq: Optional[Sequence] = None  # once submitted
        self.done: Optional[SequenceDone] = None  # once received

    def deliver(self, message: EngineMessage) -> None:
        """The sequence's ``deliver`` (called on the engine thread)."""
        self.inbox.put(self.queue, message)

    def submit(self, seq: Sequence, submit: Optional[Callable[[Sequence], None]] = None) -> None:
        """Hand ``seq`` to the engine, through ``submit`` when given (a caller that counts
        refusals); a refusal (``Overloaded``) is raised and leaves nothing to cancel."""
        (submit or self.engine.submit)(seq)
        self.seq = seq

    def __aiter__(self) -> SequenceRun:
        return self

    async def __anext__(self) -> Optional[EngineMessage]:
        if self.done is not None:
            raise StopAsyncIteration
        try:
            message = await asyncio.wait_for(self.queue.get(), timeout=self.heartbeat_s)
        except asyncio.TimeoutError:
            return None
        if isinstance(message, SequenceDone):
            self.done = message
        return message

    @property
    def left_early(self) -> bool:
        """The sequence was submitted and its consumer stopped before its ``SequenceDone``."""
        return self.seq is not None and self.done is None

    def __enter__(self) -> SequenceRun:
        return self

    def __exit__(self, *exc_info) -> None:
        if self.left_early:
            self.engine.cancel(self.seq)

"""The lanes of one Responses WebSocket: ``response.create`` frames with the same ``stream_id``
answered one at a time in the order they came (FIFO), different lanes at the same time, so their
sequences share the engine's batch. Frames without ``stream_id`` make up the default lane, which
behaves as the whole socket did before lanes.

A lane exists while it has a frame queued or being answered; ``[server] max_websocket_lanes`` of
them may exist on a socket at once, and a frame that would open one more is refused with an error
frame (the socket stays open). Each lane holds at most :data:`MAX_PENDING_FRAMES` frames waiting
(the one being answered is not counted), and all lanes together at most ``[server]
max_body_bytes`` bytes.

:class:`LaneMemory` keeps the last response of each recent lane, so ``previous_response_id`` can
continue a lane or fork from another one even with ``store: false``.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Awaitable, Callable, Optional

from kvgate.core.errors import InvalidRequest, KvgateError
from kvgate.adapters.responses.store import StoredResponse

MAX_PENDING_FRAMES = 8
MAX_LANE_NAME = 256  # characters of a stream_id: it is echoed on every event and logged

LaneName = Optional[str]  # None: the default lane
Answer = Callable[[LaneName, Any], Awaitable[bool]]  # False once the client is gone


def lane_of(frame: dict[str, Any]) -> LaneName:
    """The lane a ``response.create`` frame names (its top-level ``stream_id``)."""
    name = frame.get("stream_id")
    if name is None:
        return None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_LANE_NAME:
        raise InvalidRequest(f"stream_id must be a string of 1 to {MAX_LANE_NAME} characters.", param="stream_id",
                             code="invalid_stream_id")
    return name


def lane_limit_reached(limit: int) -> KvgateError:
    error = KvgateError(f"Too many lanes (stream_id) running on this socket (at most {limit}, [server] "
                        "max_websocket_lanes); this response.create was dropped: wait for a lane's responses to "
                        "finish, or send it on a running lane.", code="websocket_lane_limit_reached")
    error.status, error.kind = 429, "rate_limit_error"
    return error


def too_many_pending(max_bytes: int) -> KvgateError:
    return InvalidRequest(f"Too many frames waiting on this socket (at most {MAX_PENDING_FRAMES} per lane, "
                          f"{max_bytes} bytes); this one was dropped: wait for a response before sending more.",
                          code="too_many_pending_requests")


class Lanes:
    """The running lanes of one socket. Used on the event loop only, so it needs no lock."""

    def __init__(self, answer: Answer, max_lanes: int, max_bytes: int):
        self.answer, self.max_lanes, self.max_bytes = answer, max_lanes, max_bytes
        self.queues: dict[LaneName, collections.deque[tuple[int, Any]]] = {}
        self.tasks: dict[LaneName, asyncio.Task] = {}
        self.pending_bytes = 0

    def room_for(self, size: int) -> bool:
        return self.pending_bytes + size <= self.max_bytes

    def submit(self, lane: LaneName, item: Any, size: int) -> Optional[KvgateError]:
        """Queue ``item`` (a create body, or an error to answer in its turn) on ``lane``; or, when
        it must be refused, the error saying why (nothing queued)."""
        queue = self.queues.get(lane)
        if queue is None and len(self.queues) >= self.max_lanes:
            return lane_limit_reached(self.max_lanes)
        if (queue is not None and len(queue) >= MAX_PENDING_FRAMES) or not self.room_for(size):
            return too_many_pending(self.max_bytes)
        if queue is None:
            queue = self.queues[lane] = collections.deque()
            self.tasks[lane] = asyncio.create_task(self._work(lane, queue))
        queue.append((size, item))
        self.pending_bytes += size
        return None

    async def _work(self, lane: LaneName, queue: collections.deque) -> None:
        try:
            while queue:
                size, item = queue.popleft()
                self.pending_bytes -= size
                if not await self.answer(lane, item):
                    return
        finally:  # reached with no await since the last check: nothing was queued in between
            self.pending_bytes -= sum(size for size, _ in queue)
            del self.queues[lane], self.tasks[lane]

    async def cancel_all(self) -> None:
        """Cancel every lane's response in flight (the client left) and wait until they stopped."""
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class LaneMemory:
    """The last response of each of the ``size`` lanes that most recently finished one."""

    def __init__(self, size: int):
        self.size = size
        self.last: collections.OrderedDict[LaneName, StoredResponse] = collections.OrderedDict()

    def remember(self, lane: LaneName, record: StoredResponse) -> None:
        self.last.pop(lane, None)
        self.last[lane] = record
        while len(self.last) > self.size:
            self.last.popitem(last=False)

    def by_id(self) -> dict[str, StoredResponse]:
        return {record.response["id"]: record for record in self.last.values()}

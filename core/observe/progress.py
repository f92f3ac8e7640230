"""Long operations in flight -- a long prompt's cold prefill, an SSD restore -- with how far each is.

The :data:`BOARD` is read by ``/health`` (its ``progress`` field) and the cache page, and each
operation logs its start, every quarter of the way and its end, so a person watching the log of a
long request sees it move. Writers are the engine thread and the cache's loader threads; readers
are request handlers: every change and every read holds the board's lock.

One board per process: servers started in one process (tests) share it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

import attrs

log = logging.getLogger("kvgate.progress")
LOGGED_STEPS = 4  # a log line at each quarter
LONG_WORK_TOKENS = 2048  # a prefill or restore of fewer tokens is too short to show
_ids = itertools.count(1)


@attrs.define
class Operation:
    kind: str  # "prefill" | "ssd_restore"
    what: str  # e.g. "request 12, 6,000 tokens to compute"
    total: int
    unit: str = "tokens"
    done: int = 0
    id: int = attrs.field(factory=lambda: next(_ids))
    started: float = attrs.field(factory=time.monotonic)
    logged_step: int = 0

    def row(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "what": self.what, "done": self.done, "total": self.total,
                "unit": self.unit, "elapsed_s": round(time.monotonic() - self.started, 2)}


class ProgressBoard:
    def __init__(self):
        self._lock = threading.Lock()
        self._operations: dict[int, Operation] = {}

    def start(self, kind: str, what: str, total: int, unit: str = "tokens") -> Operation:
        operation = Operation(kind, what, total, unit)
        with self._lock:
            self._operations[operation.id] = operation
        log.info("%s started: %s (%d %s)", kind, what, total, unit)
        return operation

    def advance(self, operation: Operation, done: int) -> None:
        with self._lock:
            operation.done = min(done, operation.total)
            step = operation.done * LOGGED_STEPS // max(operation.total, 1)
            crossed, operation.logged_step = step > operation.logged_step, max(step, operation.logged_step)
        if crossed and operation.done < operation.total:
            log.info("%s: %s: %d/%d %s (%.1f s)", operation.kind, operation.what, operation.done, operation.total,
                     operation.unit, time.monotonic() - operation.started)

    def finish(self, operation: Operation, outcome: str = "done") -> None:
        with self._lock:
            if self._operations.pop(operation.id, None) is None:
                return
        log.info("%s %s: %s: %d/%d %s in %.1f s", operation.kind, outcome, operation.what, operation.done,
                 operation.total, operation.unit, time.monotonic() - operation.started)

    def in_flight(self) -> list[dict[str, Any]]:
        """The operations in flight, oldest first, as JSON rows."""
        with self._lock:
            return [operation.row() for operation in self._operations.values()]


BOARD = ProgressBoard()

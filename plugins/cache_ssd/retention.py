"""Snapshots the SSD tier keeps for pinned prefixes (:meth:`SsdTier.retain`).

A pinned prefix is kept by ``(namespace, tokens)``, so a retention asked before its snapshot is
committed holds once it is. Deadlines are wall-clock times (:func:`time.time`), later ones
winning; an expired retention is forgotten when next looked at. Retention is this worker's: on a
shared store another live worker's eviction does not see it, as it does not see its LRU order.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from kvgate.plugins.cache_ssd.records import SnapshotRecord


class RetainedSnapshots:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.deadlines: dict[tuple[str, tuple[int, ...]], float] = {}
        self.lock = threading.Lock()

    def keep(self, namespace: str, tokens: Sequence[int], seconds: float) -> None:
        key = (namespace, tuple(tokens))
        with self.lock:
            self.deadlines[key] = max(self.deadlines.get(key, 0.0), self.clock() + seconds)

    def holds(self, record: SnapshotRecord) -> bool:
        """Whether ``record`` is a retained prefix whose deadline has not passed."""
        key = (record.namespace, tuple(record.tokens))
        with self.lock:
            deadline = self.deadlines.get(key)
            if deadline is not None and deadline <= self.clock():
                del self.deadlines[key]
                deadline = None
            return deadline is not None

    def count(self) -> int:
        """Retentions not yet expired."""
        with self.lock:
            now = self.clock()
            return sum(deadline > now for deadline in self.deadlines.values())

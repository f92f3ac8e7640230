"""What the cache manager tells observers about the blocks its tiers store and drop.

A :class:`KvEventSink` (e.g. the gRPC worker's KV-event publisher) is attached to a running
manager with :meth:`kvgate.core.cache.manager.CacheManager.add_event_sink`. The manager calls it on
the engine thread, right after a tier took or dropped an entry, with the entry's namespace and
exact tokens: the sink works out which blocks became held or free. A sink must not block and must
not raise (an exception is logged and the sink stays attached).
"""

from __future__ import annotations

import logging
from typing import Protocol, Sequence

log = logging.getLogger("kvgate.cache")


class KvEventSink(Protocol):
    def stored(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        """``tier`` now holds the state of ``tokens`` (an entry was admitted)."""

    def removed(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        """``tier`` no longer holds the entry of ``tokens`` (evicted, superseded or closed)."""


class EventSinks:
    """The sinks of one manager; calling them never raises into the cache."""

    def __init__(self) -> None:
        self.sinks: list[KvEventSink] = []

    def add(self, sink: KvEventSink) -> None:
        self.sinks.append(sink)

    def stored(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        for sink in self.sinks:
            try:
                sink.stored(tier, namespace, tokens)
            except Exception:
                log.exception("KV event sink %r failed on stored", sink)

    def removed(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        for sink in self.sinks:
            try:
                sink.removed(tier, namespace, tokens)
            except Exception:
                log.exception("KV event sink %r failed on removed", sink)

"""A third-party backup tier for tests: snapshots held in memory, in a store that outlives a server.

:class:`MemoryTierPlugin` registers it through ``register_cache_tiers`` with the ``backup`` role,
exactly as an installed plugin would; it implements :class:`kvgate.core.cache.tiers.BackupTier`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import attrs

from kvgate.core.cache.namespace import common_prefix
from kvgate.core.cache.snapshot import PendingSnapshot, StaleChunk
from kvgate.core.cache.tiers import TierSpec
from kvgate.core.hookspecs import hookimpl


@attrs.define(eq=False)
class MemorySnapshot:
    id: str
    namespace: str
    cache_key: Optional[str]
    tokens: list[int]
    keys: list[bytes]
    chunk_tokens: int
    state_format: str


@attrs.define(eq=False)
class MemoryStore:
    """Chunks by key and snapshots by id, plus counters a test reads."""

    chunks: dict[bytes, tuple[list[int], bytes]] = attrs.field(factory=dict)
    snapshots: dict[str, MemorySnapshot] = attrs.field(factory=dict)
    submitted: int = 0
    restored: int = 0
    closed: int = 0


class MemoryTier:
    def __init__(self, store: MemoryStore, state_format: str):
        self.store, self.state_format, self.name = store, state_format, "memory"

    def bind(self, metrics, name: str) -> None:
        self.name = name

    def _candidates(self, namespace: str):
        return [s for s in self.store.snapshots.values() if s.namespace == namespace]

    def longest(self, namespace: str, tokens: Sequence[int]):
        scored = [(common_prefix(s.tokens, tokens), s) for s in self._candidates(namespace)]
        length, best = max(scored, key=lambda item: item[0], default=(0, None))
        return (best, length) if length else (None, 0)

    def exact(self, namespace: str, cache_key: Optional[str], tokens: Sequence[int]):
        named = [s for s in self._candidates(namespace) if cache_key is not None and s.cache_key == cache_key]
        if not named:
            return None, 0
        snapshot = max(named, key=lambda s: len(s.tokens))
        return snapshot, common_prefix(snapshot.tokens, tokens)

    def pin_known(self, keys: Sequence[bytes]) -> set[int]:
        return {i for i, key in enumerate(keys) if key in self.store.chunks}

    def unpin(self, keys: Sequence[bytes]) -> None:
        pass

    def retain(self, namespace: str, tokens: Sequence[int], seconds: float) -> None:
        pass  # nothing is ever evicted from this store

    def submit(self, pending: PendingSnapshot, wait: bool) -> bool:
        for index, key in enumerate(pending.keys):
            if index in pending.payloads:
                self.store.chunks[key] = (pending.chunk_tokens_at(index), pending.payloads[index])
            elif key not in self.store.chunks:
                raise KeyError(f"chunk {index} of {pending.id} is neither held nor given")
        self.store.snapshots[pending.id] = MemorySnapshot(
            pending.id, pending.namespace, pending.cache_key, list(pending.tokens), list(pending.keys),
            pending.chunk_tokens, pending.state_format)
        self.store.submitted += 1
        return True

    def read(self, snapshot: MemorySnapshot, tokens_needed: int) -> list[tuple[list[int], bytes]]:
        if snapshot.state_format != self.state_format:
            raise StaleChunk(f"state format {snapshot.state_format!r}, the runtime's is {self.state_format!r}")
        count = -(-tokens_needed // snapshot.chunk_tokens)
        self.store.restored += 1
        return [self.store.chunks[key] for key in snapshot.keys[:count]]

    def drop_bad(self, snapshot: MemorySnapshot, reason: str, bad_key: Optional[bytes]) -> None:
        self.store.snapshots.pop(snapshot.id, None)

    def touch(self, snapshot: MemorySnapshot) -> None:
        pass

    def stats(self) -> dict:
        return {"snapshots": len(self.store.snapshots), "chunks": len(self.store.chunks)}

    def close(self) -> None:
        self.store.closed += 1


class MemoryTierPlugin:
    """Registers the in-memory tier under ``name`` as a backup tier over ``store``."""

    def __init__(self, store: MemoryStore, name: str = "memory", order: int = 50):
        self.store, self.name, self.order = store, name, order

    def build(self, config, runtime) -> MemoryTier:
        return MemoryTier(self.store, runtime.state_format)

    @hookimpl
    def register_cache_tiers(self, register):
        register(self.name, TierSpec(role="backup", build=self.build, order=self.order))

"""The in-memory index of committed SSD snapshots: a prefix tree per namespace and cache ids.

Rebuilt from the manifest at start. Guarded by the owning tier's lock.
"""

from __future__ import annotations

from typing import Optional, Sequence

from kvgate.core.cache.namespace import common_prefix
from kvgate.plugins.cache_ssd.records import SnapshotRecord
from kvgate.plugins.cache_device.trie import PrefixTrie


class SsdIndex:
    def __init__(self) -> None:
        self.tries: dict[str, PrefixTrie] = {}
        self.by_cache_key: dict[tuple[str, str], dict[str, SnapshotRecord]] = {}

    def add(self, record: SnapshotRecord) -> None:
        trie = self.tries.setdefault(record.namespace, PrefixTrie())
        existing = trie.insert(record.tokens, record)
        if existing is not None:
            self.remove(existing)
            trie.insert(record.tokens, record)
        if record.cache_key is not None:
            self.by_cache_key.setdefault((record.namespace, record.cache_key), {})[record.id] = record

    def remove(self, record: SnapshotRecord) -> None:
        if record.trie_node is not None:
            self.tries[record.namespace].remove(record)
        if record.cache_key is not None:
            group = self.by_cache_key.get((record.namespace, record.cache_key), {})
            if group.get(record.id) is record:
                del group[record.id]
            if not group:
                self.by_cache_key.pop((record.namespace, record.cache_key), None)

    def longest(self, namespace: str, tokens: Sequence[int]) -> tuple[Optional[SnapshotRecord], int]:
        trie = self.tries.get(namespace)
        return trie.longest(tokens) if trie is not None else (None, 0)

    def exact(self, namespace: str, cache_key: Optional[str], tokens: Sequence[int]):
        """The newest snapshot under ``cache_key`` and its verified common prefix with ``tokens``."""
        group = self.by_cache_key.get((namespace, cache_key)) if cache_key is not None else None
        if not group:
            return None, 0
        record = max(group.values(), key=lambda r: (r.round, r.created))
        return record, common_prefix(record.tokens, tokens)

    def superseded(self, record: SnapshotRecord, prefix_rounds: int) -> list[SnapshotRecord]:
        """Older rounds of the same conversation (same cache id, a prefix of ``record``) past the limit."""
        group = self.by_cache_key.get((record.namespace, record.cache_key), {}) if record.cache_key else {}
        return [old for old in group.values()
                if old is not record and old.round <= record.round - prefix_rounds
                and len(old.tokens) < len(record.tokens) and record.tokens[:len(old.tokens)] == old.tokens]

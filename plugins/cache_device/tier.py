"""The device tier: resident sessions in a prefix graph (one radix tree per namespace).

Every finished request's terminal state becomes an entry. Entries that share a prefix share its
blocks (they were forked from each other), so the tier measures its size as the *union* of its
entries' block tables times the runtime's block size: real allocations, not token counts. The
auxiliary state the sessions hold beside their blocks (a hybrid model's recurrent-state snapshots)
counts against the budget too (:meth:`DeviceTier.aux_bytes`) and goes with its entry.

Eviction order (:meth:`DeviceTier.next_victim`): leaves only -- an entry whose descendants are
resident stays, since releasing it would free almost nothing and lose a fork point -- least
recently used first. The round limit (:meth:`superseded`) drops intermediate turns of one
conversation: an entry more than ``prefix_rounds`` rounds above a new entry, that is not a fork
point, is redundant (its descendant holds its tokens and serves any hit on them).
"""

from __future__ import annotations

import collections
import itertools
from typing import Any, Optional, Sequence

import attrs

from kvgate.core.cache.namespace import common_prefix
from kvgate.plugins.cache_device.trie import PrefixTrie
from kvgate.core.runtime import ModelRuntime, Session


@attrs.define(eq=False)
class DeviceEntry:
    namespace: str
    session: Session
    cache_key: Optional[str]
    round: int
    last_used: int
    backed_up: bool = False
    pinned: bool = False  # set by the cache manager: a retained prefix, never evicted
    trie_node: Any = None

    @property
    def tokens(self) -> list[int]:
        return self.session.tokens

    @property
    def resident(self) -> bool:
        return self.trie_node is not None


class DeviceTier:

    def __init__(self, runtime: ModelRuntime, budget_bytes: int, reserve_tokens: int, prefix_rounds: int):
        self.runtime, self.budget_bytes, self.prefix_rounds = runtime, budget_bytes, prefix_rounds
        self.reserve_blocks = -(-reserve_tokens // runtime.block_size)
        self.tries: dict[str, PrefixTrie] = {}
        self.by_cache_key: dict[tuple[str, str], DeviceEntry] = {}
        self.block_refs: collections.Counter[int] = collections.Counter()
        self.clock = itertools.count(1)

    # --- lookups ----------------------------------------------------------------------------------
    def longest(self, namespace: str, tokens: Sequence[int]) -> tuple[Optional[DeviceEntry], int]:
        trie = self.tries.get(namespace)
        return trie.longest(tokens) if trie is not None else (None, 0)

    def exact(self, namespace: str, cache_key: Optional[str], tokens: Sequence[int]):
        entry = self.by_cache_key.get((namespace, cache_key)) if cache_key is not None else None
        if entry is None or not entry.resident:
            return None, 0
        return entry, common_prefix(entry.tokens, tokens)

    def touch(self, entry: DeviceEntry) -> None:
        entry.last_used = next(self.clock)

    # --- admission and release --------------------------------------------------------------------
    def admit(self, namespace: str, session: Session, cache_key: Optional[str]) -> tuple[DeviceEntry, bool]:
        """Make ``session`` resident; when its exact tokens already are, keep that entry instead."""
        trie = self.tries.setdefault(namespace, PrefixTrie())
        entry = DeviceEntry(namespace, session, cache_key, 1, next(self.clock))
        existing = trie.insert(session.tokens, entry)
        if existing is not None:
            self.runtime.release(session)
            entry, is_new = existing, False
            self.touch(entry)
        else:
            parent = trie.parent_entry(entry)
            entry.round = parent.round + 1 if parent is not None else 1
            self.block_refs.update(session.block_table)
            is_new = True
        if cache_key is not None:
            entry.cache_key = cache_key
            self.by_cache_key[(namespace, cache_key)] = entry
        return entry, is_new

    def remove(self, entry: DeviceEntry) -> None:
        self.tries[entry.namespace].remove(entry)
        if entry.cache_key is not None and self.by_cache_key.get((entry.namespace, entry.cache_key)) is entry:
            del self.by_cache_key[(entry.namespace, entry.cache_key)]
        self.block_refs.subtract(entry.session.block_table)
        self.block_refs = +self.block_refs
        self.runtime.release(entry.session)

    def superseded(self, entry: DeviceEntry) -> list[DeviceEntry]:
        out, above = [], PrefixTrie.parent_entry(entry)
        while above is not None:
            redundant = entry.round - above.round >= self.prefix_rounds and not PrefixTrie.is_fork_point(above)
            if redundant and not above.pinned:
                out.append(above)
            above = PrefixTrie.parent_entry(above)
        return out

    def next_victim(self) -> Optional[DeviceEntry]:
        leaves = (e for trie in self.tries.values() for e in trie.entries()
                  if not PrefixTrie.has_descendants(e) and not e.pinned)
        return min(leaves, key=lambda e: e.last_used, default=None)

    # --- sizes ------------------------------------------------------------------------------------
    def block_bytes(self) -> int:
        return self.runtime.pool_stats()["block_bytes"]

    def resident_bytes(self) -> int:
        return len(self.block_refs) * self.block_bytes()

    def aux_bytes(self) -> int:
        """The entries' snapshots and other auxiliary state: part of their nodes, freed with them."""
        return self.runtime.aux_state_bytes([e.session for e in self.entries()])

    def pinned_bytes(self) -> int:
        blocks = {block for entry in self.entries() if entry.pinned for block in entry.session.block_table}
        return len(blocks) * self.block_bytes()

    def entries(self) -> list[DeviceEntry]:
        return [e for trie in self.tries.values() for e in trie.entries()]

    def over_budget(self) -> bool:
        if not self.block_refs:
            return False
        pool = self.runtime.pool_stats()
        held = self.resident_bytes() + self.aux_bytes()
        return held > self.budget_bytes or pool["blocks_free"] < self.reserve_blocks

    def close(self) -> None:
        """Nothing to flush: the entries live in the runtime's pool."""

    def stats(self) -> dict:
        return {"entries": sum(t.size for t in list(self.tries.values())), "bytes": self.resident_bytes(),
                "aux_bytes": self.aux_bytes(),
                "budget_bytes": self.budget_bytes, "reserve_blocks": self.reserve_blocks,
                "pool": dict(self.runtime.pool_stats())}

"""A cost-bounded map with approximate LRU eviction by sampling (the policy of SMG's tokenizer caches).

Every entry has a cost; the sum of costs never exceeds ``capacity``. When room is needed, a few
random entries are sampled and the least recently used of them is evicted -- O(1) per eviction,
no linked list to maintain on every hit.
"""

from __future__ import annotations

import random
from typing import Any, Hashable, Optional

SAMPLE_SIZE = 8


class _Slot:
    __slots__ = ("value", "cost", "last_used", "index")

    def __init__(self, value: Any, cost: int, last_used: int, index: int):
        self.value = value
        self.cost = cost
        self.last_used = last_used
        self.index = index


class SampledLRU:
    """Not thread-safe on its own: the tokenizer cache holds a lock around every call."""

    def __init__(self, capacity: int, sample_size: int = SAMPLE_SIZE, seed: Optional[int] = None,
                 max_entries: Optional[int] = None):
        self.capacity = capacity
        self.max_entries = max_entries  # a second bound, on the number of entries (None: only costs)
        self.sample_size = sample_size
        self.used = 0
        self._slots: dict[Hashable, _Slot] = {}
        self._keys: list[Hashable] = []  # dense, so a random sample is O(1)
        self._clock = 0
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slots

    def get(self, key: Hashable) -> Any:
        slot = self._slots.get(key)
        if slot is None:
            return None
        self._clock += 1
        slot.last_used = self._clock
        return slot.value

    def put(self, key: Hashable, value: Any, cost: int) -> int:
        """Store ``value``; returns how many entries were evicted to make room.

        An entry that alone exceeds the capacity is not stored (and evicts nothing).
        """
        if cost > self.capacity:
            return 0
        self._remove(key)
        evicted = 0
        while self._keys and (self.used + cost > self.capacity or len(self._keys) >= (self.max_entries or 1 << 62)):
            self._remove(self._pick_victim())
            evicted += 1
        self._clock += 1
        self._slots[key] = _Slot(value, cost, self._clock, len(self._keys))
        self._keys.append(key)
        self.used += cost
        return evicted

    def clear(self) -> None:
        self._slots.clear()
        self._keys.clear()
        self.used = 0

    def _pick_victim(self) -> Hashable:
        count = len(self._keys)
        if count <= self.sample_size:
            candidates = self._keys
        else:
            candidates = [self._keys[self._rng.randrange(count)] for _ in range(self.sample_size)]
        return min(candidates, key=lambda key: self._slots[key].last_used)

    def _remove(self, key: Hashable) -> None:
        slot = self._slots.pop(key, None)
        if slot is None:
            return
        last = self._keys.pop()
        if slot.index < len(self._keys):
            self._keys[slot.index] = last
            self._slots[last].index = slot.index
        self.used -= slot.cost

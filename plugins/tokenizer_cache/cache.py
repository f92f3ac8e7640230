"""The two-level tokenizer cache (SMG's semantics), in front of one tokenizer.

* L0, exact match: keyed on the whole input text, at most ``l0_max_entries`` entries and
  ``l0_max_bytes`` bytes (the input's UTF-8 and 4 per id), approximate LRU by sampling; an entry
  holds the input and its token ids.
* L1, prefix match at special-token boundaries (see :mod:`.cache_l1`): on a miss one entry per
  boundary of the input; on a hit only the text after the deepest cached boundary is tokenized,
  and one entry is added at the input's deepest boundary if it lies past the match. Bounded by
  ``l1_max_bytes``. An input without boundary tokens always misses.

Both layers key their entries by the caller's cache namespace (a tenant's) as well as the text: one
tenant's texts are never a hit for another, so none can time ``count_tokens`` to learn whether
another recently sent a text (issue 31, finding 8).

Tokenization runs outside the lock; only cache reads and writes are serialized.
"""

from __future__ import annotations

import threading
from array import array
from typing import Callable, Optional

from tokenizers import Encoding

from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.cache_l1 import Boundaries, L1Cache
from kvgate.plugins.tokenizer_cache.cache_lru import SampledLRU
from kvgate.plugins.tokenizer_cache.cache_metrics import TokenizerCacheMetrics


class _LayerStats:
    def __init__(self) -> None:
        self.hits = self.misses = self.evictions = self.reused_bytes = 0

    def as_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                "reused_bytes": self.reused_bytes}


class TokenizerCache:
    def __init__(self, encode: Callable[[str], Encoding], config: TokenizerCacheConfig,
                 boundary_tokens: dict[str, int], metrics: TokenizerCacheMetrics, seed: Optional[int] = None):
        self._encode = encode
        self._metrics = metrics
        self._lock = threading.Lock()
        self._l0 = (SampledLRU(config.l0_max_bytes, seed=seed, max_entries=config.l0_max_entries)
                    if config.enable_l0 else None)
        self._l1 = L1Cache(list(boundary_tokens), config.l1_max_bytes, seed) if config.enable_l1 else None
        self._boundary_ids = frozenset(boundary_tokens.values())
        self._stats = {"l0": _LayerStats(), "l1": _LayerStats()}

    def encode(self, text: str, namespace: str = "") -> list[int]:
        if self._l0 is None:
            return self._through_l1(text, namespace)
        key = (namespace, text)
        with self._lock:
            cached = self._l0.get(key)
        self._record("l0", cached is not None, cached[1] if cached else 0)
        if cached is not None:
            return cached[0].tolist()
        ids = self._through_l1(text, namespace)
        size = len(text.encode("utf-8", "surrogatepass"))
        entry = (array("I", ids), size)
        with self._lock:
            self._evicted("l0", self._l0.put(key, entry, size + len(namespace) + 4 * len(ids)))
        return ids

    def _through_l1(self, text: str, namespace: str) -> list[int]:
        if self._l1 is None:
            return self._encode(text).ids
        bounds = self._l1.boundaries(text, namespace)
        with self._lock:
            match = self._l1.longest_match(bounds) if bounds else None
        if match is None:
            self._record("l1", False)
            encoding = self._encode(text)
            if bounds:
                self._store_boundaries(bounds, encoding, 0, array("I"))
            return encoding.ids
        index, prefix = match
        self._record("l1", True, bounds.byte_ends[index])
        start = bounds.ends[index]
        suffix = self._encode(text[start:])
        if index < len(bounds.ends) - 1:
            self._store_boundaries(bounds, suffix, start, prefix, deepest_only=True)
        return prefix.tolist() + suffix.ids

    def _store_boundaries(self, bounds: Boundaries, encoding: Encoding, start: int, prefix: array,
                          deepest_only: bool = False) -> None:
        """Store prefix + encoding's tokens up to each boundary the tokenizer really cut there."""
        ids, offsets = encoding.ids, encoding.offsets
        found = [
            (bounds.index_of_end[start + offsets[i][1]], i)
            for i, token_id in enumerate(ids)
            if token_id in self._boundary_ids and start + offsets[i][1] in bounds.index_of_end
        ]
        if deepest_only:
            found = [pair for pair in found[-1:] if pair[0] == len(bounds.ends) - 1]
        if not found:
            return
        all_ids = prefix + array("I", ids)
        with self._lock:
            for index, position in found:
                self._evicted("l1", self._l1.store(bounds, index, all_ids[: len(prefix) + position + 1]))

    def _record(self, layer: str, hit: bool, reused_bytes: int = 0) -> None:
        stats = self._stats[layer]
        with self._lock:
            if hit:
                stats.hits += 1
                stats.reused_bytes += reused_bytes
            else:
                stats.misses += 1
        self._metrics.lookup(layer, hit, reused_bytes)

    def _evicted(self, layer: str, count: int) -> None:  # called with the lock held
        self._stats[layer].evictions += count
        self._metrics.evicted(layer, count)

    def clear(self) -> None:
        with self._lock:
            for layer in (self._l0, self._l1):
                if layer is not None:
                    layer.clear()

    def stats(self) -> dict:
        with self._lock:
            l0 = {"enabled": self._l0 is not None, "entries": len(self._l0) if self._l0 else 0,
                  "max_entries": self._l0.max_entries if self._l0 else 0, "bytes": self._l0.used if self._l0 else 0,
                  "max_bytes": self._l0.capacity if self._l0 else 0, **self._stats["l0"].as_dict()}
            l1 = {"enabled": self._l1 is not None, "entries": self._l1.entries if self._l1 else 0,
                  "bytes": self._l1.used_bytes if self._l1 else 0,
                  "max_bytes": self._l1.capacity_bytes if self._l1 else 0, **self._stats["l1"].as_dict()}
        return {"l0": l0, "l1": l1}

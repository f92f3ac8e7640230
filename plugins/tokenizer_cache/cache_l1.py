"""L1: token ids of input prefixes that end right after a special token.

An entry is keyed by the BLAKE2b digest of the cache namespace and the prefix's UTF-8 bytes (so
one namespace's prefixes never match another's) and holds the prefix's token
ids (4 bytes each). Its cost is SMG's -- the prefix's length in bytes plus 4 bytes per token --
plus a fixed ``ENTRY_OVERHEAD_BYTES`` for the Python objects around it, so the byte budget bounds
the memory really held (the prefix text itself is not kept, only its digest).
"""

from __future__ import annotations

import hashlib
import re
from array import array
from typing import Optional

from kvgate.plugins.tokenizer_cache.cache_lru import SampledLRU

ENTRY_OVERHEAD_BYTES = 512  # measured ~350 per entry (slot, array header, digest, dict and list slots)
DIGEST_SIZE = 32


class Boundaries:
    """The split points of one input: char offsets, UTF-8 byte offsets and prefix digests."""

    __slots__ = ("ends", "byte_ends", "digests", "index_of_end")

    def __init__(self, text: str, ends: list[int], namespace: str = ""):
        self.ends = ends
        self.byte_ends: list[int] = []
        self.digests: list[bytes] = []
        hasher = hashlib.blake2b(digest_size=DIGEST_SIZE)
        scope = namespace.encode("utf-8", "surrogatepass")
        hasher.update(len(scope).to_bytes(8, "little") + scope)  # length first: no prefix is ambiguous
        start = size = 0
        for end in ends:
            chunk = text[start:end].encode("utf-8", "surrogatepass")
            hasher.update(chunk)
            size += len(chunk)
            self.byte_ends.append(size)
            self.digests.append(hasher.copy().digest())
            start = end
        self.index_of_end = {end: index for index, end in enumerate(ends)}


class L1Cache:
    def __init__(self, boundary_tokens: list[str], max_bytes: int, seed: Optional[int] = None):
        self.boundary_tokens = list(boundary_tokens)
        ordered = sorted(self.boundary_tokens, key=len, reverse=True)  # longest wins at one position
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._lru = SampledLRU(max_bytes, seed=seed)

    @property
    def entries(self) -> int:
        return len(self._lru)

    @property
    def used_bytes(self) -> int:
        return self._lru.used

    @property
    def capacity_bytes(self) -> int:
        return self._lru.capacity

    def boundaries(self, text: str, namespace: str = "") -> Optional[Boundaries]:
        """Split points of ``text`` in cache ``namespace``, or None when it holds no boundary token."""
        if self._pattern is None:
            return None
        ends = [match.end() for match in self._pattern.finditer(text)]
        return Boundaries(text, ends, namespace) if ends else None

    def longest_match(self, bounds: Boundaries) -> Optional[tuple[int, array]]:
        """(boundary index, prefix ids) of the deepest cached boundary, or None."""
        for index in range(len(bounds.ends) - 1, -1, -1):
            ids = self._lru.get(bounds.digests[index])
            if ids is not None:
                return index, ids
        return None

    def store(self, bounds: Boundaries, index: int, ids: array) -> int:
        """Cache ``ids`` as the tokens of the prefix ending at boundary ``index``; returns evictions."""
        key = bounds.digests[index]
        if key in self._lru:
            return 0
        cost = bounds.byte_ends[index] + 4 * len(ids) + ENTRY_OVERHEAD_BYTES
        return self._lru.put(key, ids, cost)

    def clear(self) -> None:
        self._lru.clear()

"""Types the cache manager shares with backup tiers: a snapshot to store, a stored chunk that is bad."""

from __future__ import annotations

from typing import Optional

import attrs


@attrs.define(eq=False)
class PendingSnapshot:
    """A snapshot to back up: chunk keys, and the exported state of every chunk the tier may lack.

    ``keys[i]`` names chunk ``i`` (tokens ``[i * chunk_tokens, (i + 1) * chunk_tokens)``) and every
    token before it (:func:`kvgate.core.cache.namespace.chunk_keys`); ``payloads[i]`` is the
    runtime's :meth:`~kvgate.core.runtime.ModelRuntime.export_chunk` of that range, present for the
    chunks the tier did not report as known; ``state_format`` is the runtime's
    :attr:`~kvgate.core.runtime.ModelRuntime.state_format`; ``state_bytes`` its size estimate.
    """

    namespace: str
    tokens: list[int]
    cache_key: Optional[str]
    round: int
    chunk_tokens: int
    keys: list[bytes]
    payloads: dict[int, bytes]
    state_bytes: int
    state_format: str = ""

    @property
    def id(self) -> str:
        return self.keys[-1].hex()[:32]

    def chunk_tokens_at(self, index: int) -> list[int]:
        return self.tokens[index * self.chunk_tokens:(index + 1) * self.chunk_tokens]


class BadChunk(ValueError):
    """Stored state that fails validation (damaged, truncated, foreign or stale); ``key`` names the chunk.

    A backup tier's ``read`` raises it; the manager then calls the tier's ``drop_bad`` and computes
    the request from a colder source.
    """

    key: bytes | None = None


class StaleChunk(BadChunk):
    """Stored state in an older storage format, or of another runtime ``state_format``: never misread."""

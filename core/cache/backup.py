"""Backups of resident state to the backup tiers (engine thread: the runtime is not thread-safe).

Only the chunks a tier does not already hold or have queued are exported (once, for every tier
that lacks them), so a new turn of a conversation costs the export of its new chunks only.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from kvgate.core.cache.namespace import chunk_keys
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.core.runtime import ModelRuntime, OutOfBlocks, Session


def is_pool_exhausted(exc: BaseException) -> bool:
    """The runtime ran out of blocks (``OutOfBlocks``, or ``PoolExhausted`` of a block pool)."""
    return isinstance(exc, OutOfBlocks) or any(cls.__name__ == "PoolExhausted" for cls in type(exc).__mro__)


class Backups:
    def __init__(self, runtime: ModelRuntime, tiers: Sequence[Any], chunk_tokens: int, min_tokens: int):
        self.runtime, self.tiers, self.chunk_tokens, self.min_tokens = runtime, list(tiers), chunk_tokens, min_tokens

    def worth_keeping(self, session: Session) -> bool:
        return bool(self.tiers) and session.length >= self.min_tokens

    def snapshots(self, namespace: str, session: Session, cache_key: Optional[str],
                  round_: int) -> list[PendingSnapshot]:
        """One pinned snapshot per tier, each with the payloads of the chunks that tier lacks."""
        tokens, size = list(session.tokens), self.chunk_tokens
        keys = chunk_keys(namespace, tokens, size)
        known = [tier.pin_known(keys) for tier in self.tiers]
        needed = {i for i in range(len(keys)) if any(i not in k for k in known)}
        try:
            exported = {i: self.runtime.export_chunk(session, i * size, min((i + 1) * size, len(tokens)))
                        for i in sorted(needed)}
        except BaseException:
            for tier in self.tiers:
                tier.unpin(keys)
            raise
        return [PendingSnapshot(namespace=namespace, tokens=tokens, cache_key=cache_key, round=round_,
                                chunk_tokens=size, keys=keys,
                                payloads={i: data for i, data in exported.items() if i not in tier_known},
                                state_bytes=self.runtime.state_bytes(len(tokens)),
                                state_format=self.runtime.state_format)
                for tier_known in known]

    def back_up(self, namespace: str, session: Session, cache_key: Optional[str], round_: int, wait: bool) -> bool:
        """Submit to every backup tier; without ``wait`` a tier that is behind skips it. True when
        every tier took the snapshot."""
        if not self.worth_keeping(session):
            return False
        pending = self.snapshots(namespace, session, cache_key, round_)
        results = [tier.submit(snapshot, wait=wait) for tier, snapshot in zip(self.tiers, pending)]
        return all(results)

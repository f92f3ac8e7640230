"""Backups of device state to the SSD tier (engine thread: the runtime is not thread-safe).

Only the chunks the SSD tier does not already hold or have queued are exported, so a new turn of
a conversation costs the export of its new chunks only.
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.cache.namespace import chunk_keys
from kvgate.core.cache.ssd_store import PendingSnapshot
from kvgate.core.runtime import ModelRuntime, OutOfBlocks, Session


def is_pool_exhausted(exc: BaseException) -> bool:
    """The runtime ran out of blocks (``OutOfBlocks``, or ``PoolExhausted`` of a block pool)."""
    return isinstance(exc, OutOfBlocks) or any(cls.__name__ == "PoolExhausted" for cls in type(exc).__mro__)


class Backups:
    def __init__(self, runtime: ModelRuntime, ssd: Any, chunk_tokens: int, min_tokens: int):
        self.runtime, self.ssd, self.chunk_tokens, self.min_tokens = runtime, ssd, chunk_tokens, min_tokens

    def worth_keeping(self, session: Session) -> bool:
        return self.ssd is not None and session.length >= self.min_tokens

    def snapshot(self, namespace: str, session: Session, cache_key: Optional[str], round_: int) -> PendingSnapshot:
        tokens, size = list(session.tokens), self.chunk_tokens
        keys = chunk_keys(namespace, tokens, size)
        known = self.ssd.pin_known(keys)
        try:
            payloads = {i: self.runtime.export_state(session, i * size, min((i + 1) * size, len(tokens)))
                        for i in range(len(keys)) if i not in known}
        except BaseException:
            self.ssd.unpin(keys)
            raise
        return PendingSnapshot(namespace=namespace, tokens=tokens, cache_key=cache_key, round=round_,
                               chunk_tokens=size, keys=keys, payloads=payloads,
                               state_bytes=len(tokens) * self.runtime.state_bytes_per_token())

    def back_up(self, namespace: str, session: Session, cache_key: Optional[str], round_: int, wait: bool) -> bool:
        """Queue a backup; without ``wait`` it is skipped when the writer is behind."""
        if not self.worth_keeping(session):
            return False
        return self.ssd.submit(self.snapshot(namespace, session, cache_key, round_), wait=wait)

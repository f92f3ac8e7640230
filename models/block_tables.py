"""Session bookkeeping over a :class:`KVPool`: block tables, forks, truncation, copy-on-write.

A session of ``n`` tokens holds exactly ``ceil(n / block_size)`` blocks. Blocks shared with other
sessions are never written: a shared partial last block is copied before the first append.
"""

from __future__ import annotations

from typing import Optional, Sequence

from kvgate.core.runtime import Session
from kvgate.models.kv_pool import KVPool, PoolExhausted


class BlockTables:
    pool: KVPool
    block_size: int

    def _blocks_for(self, length: int) -> int:
        return -(-length // self.block_size)

    def new_session(self) -> Session:
        return Session(id=next(self._ids))

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        length = session.length if length is None else length
        if not 0 <= length <= session.length:
            raise ValueError(f"cannot fork {length} tokens of a session of {session.length}")
        blocks = session.block_table[: self._blocks_for(length)]
        self.pool.retain(blocks)
        return Session(id=next(self._ids), tokens=session.tokens[:length], block_table=list(blocks))

    def truncate(self, session: Session, length: int) -> None:
        if not 0 <= length <= session.length:
            raise ValueError(f"cannot truncate a session of {session.length} tokens to {length}")
        del session.tokens[length:]
        self._trim(session)

    def release(self, session: Session) -> None:
        self.pool.release(session.block_table)
        session.block_table = []
        session.tokens = []

    def session_bytes(self, session: Session) -> int:
        return len(session.block_table) * self.pool.block_bytes

    def pool_stats(self) -> dict[str, int]:
        return self.pool.stats()

    def _trim(self, session: Session) -> None:
        keep = self._blocks_for(session.length)
        self.pool.release(session.block_table[keep:])
        del session.block_table[keep:]

    def _reserve(self, sessions: Sequence[Session], count: int) -> None:
        """Make room for ``count`` more tokens in each session; all or nothing."""
        try:
            for session in sessions:
                self._reserve_one(session, count)
        except PoolExhausted:
            for session in sessions:
                self._trim(session)
            raise

    def _reserve_one(self, session: Session, count: int) -> None:
        table, length = session.block_table, session.length
        if length % self.block_size and self.pool.refcount[table[-1]] > 1:
            shared = table[-1]
            table[-1] = self.pool.copy_block(shared)
            self.pool.release([shared])
        missing = self._blocks_for(length + count) - len(table)
        if missing > 0:
            table.extend(self.pool.allocate(missing))

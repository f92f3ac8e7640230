"""PagedKV: sessions over a paged pool of per-token state, the component every runtime composes.

A session of ``n`` tokens holds exactly ``ceil(n / block_size)`` blocks of the pool. Blocks shared
with other sessions are never written: a shared partial last block is copied before the first
append. Besides the block tables (forks, truncation, copy-on-write, reservation), it checks and
claims room for a forward pass and lays out a session's slots the way the attention reads them.
"""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import torch

from kvgate.core.runtime import Session, check_decode_batch
from kvgate.models.kv_forward import Context
from kvgate.models.kv_pool import KVPool, PoolExhausted


class PagedKV:
    def __init__(self, pool: KVPool, block_size: int, vocab_size: int, max_context: int):
        self.pool, self.block_size = pool, block_size
        self.vocab_size, self.max_context = vocab_size, max_context
        self.device = pool.device
        self._ids = itertools.count(1)

    # --- block tables ----------------------------------------------------------------------------
    def blocks_for(self, length: int) -> int:
        return -(-length // self.block_size)

    def new_session(self) -> Session:
        return Session(id=next(self._ids))

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        length = session.length if length is None else length
        if not 0 <= length <= session.length:
            raise ValueError(f"cannot fork {length} tokens of a session of {session.length}")
        blocks = session.block_table[: self.blocks_for(length)]
        self.pool.retain(blocks)
        return Session(id=next(self._ids), tokens=session.tokens[:length], block_table=list(blocks))

    def truncate(self, session: Session, length: int) -> None:
        if not 0 <= length <= session.length:
            raise ValueError(f"cannot truncate a session of {session.length} tokens to {length}")
        del session.tokens[length:]
        self.trim(session)

    def release(self, session: Session) -> None:
        self.pool.release(session.block_table)
        session.block_table = []
        session.tokens = []

    def session_bytes(self, session: Session) -> int:
        return len(session.block_table) * self.pool.block_bytes

    def trim(self, session: Session) -> None:
        """Release the blocks past the session's length (state there was never counted as held)."""
        keep = self.blocks_for(session.length)
        self.pool.release(session.block_table[keep:])
        del session.block_table[keep:]

    def reserve(self, sessions: Sequence[Session], count: int) -> None:
        """Make room for ``count`` more tokens in each session; all or nothing."""
        try:
            for session in sessions:
                self._reserve_one(session, count)
        except PoolExhausted:
            for session in sessions:
                self.trim(session)
            raise

    def _reserve_one(self, session: Session, count: int) -> None:
        table, length = session.block_table, session.length
        if length % self.block_size and self.pool.refcount[table[-1]] > 1:
            shared = table[-1]
            table[-1] = self.pool.copy_block(shared)
            self.pool.release([shared])
        missing = self.blocks_for(length + count) - len(table)
        if missing > 0:
            table.extend(self.pool.allocate(missing))

    # --- claims for a forward pass -----------------------------------------------------------------
    def check_room(self, session: Session, count: int) -> None:
        if session.length + count > self.max_context:
            raise ValueError(f"context full: {session.length} + {count} tokens exceed max_context "
                             f"{self.max_context}")

    def token_tensor(self, tokens: Sequence[int]) -> torch.Tensor:
        tokens = list(tokens)
        if tokens and (min(tokens) < 0 or max(tokens) >= self.vocab_size):
            raise ValueError(f"token id out of range [0, {self.vocab_size})")
        return torch.tensor(tokens, dtype=torch.long, device=self.device)

    def claim_prefill(self, session: Session, tokens: Sequence[int]) -> torch.Tensor:
        """The ids of ``tokens`` to prefill after ``session``, with room checked and blocks reserved."""
        if len(tokens) == 0:
            raise ValueError("prefill needs at least one token")
        ids = self.token_tensor(tokens)
        self.check_room(session, len(tokens))
        self.reserve([session], len(tokens))
        return ids

    def claim_decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        """The ids of one decode step's ``tokens``, with room checked and a slot reserved per session."""
        check_decode_batch(sessions, tokens)
        ids = self.token_tensor(tokens)
        for session in sessions:
            self.check_room(session, 1)
        self.reserve(sessions, 1)
        return ids

    # --- slot layouts ------------------------------------------------------------------------------
    def slots(self, session: Session, start: int, end: int) -> torch.Tensor:
        return self.pool.slots(session.block_table, start, end)

    def context(self, session: Session, end: int) -> Context:
        """Positions [0, end) of one session: a slot range when its blocks are consecutive, else slots."""
        span = self.pool.span(session.block_table, end)
        return span if span is not None else self.pool.slots(session.block_table, 0, end)

    def padded_span(self, sessions: Sequence[Session], keys: int) -> Optional[slice]:
        """For one session whose blocks are consecutive, the slot range of its first ``keys`` keys
        (padding included) when all of it lies in blocks the pool has handed out, else None. The
        padding keys then hold zeros or another session's finite K/V, which the invariant attention's
        mask hides exactly as it hides gathered padding, and the attention reads a view, not a copy."""
        if len(sessions) != 1:
            return None
        session = sessions[0]
        span = self.pool.span(session.block_table, session.length + 1)
        if span is None or span.start + keys > self.pool.blocks_allocated * self.block_size:
            return None
        return slice(span.start, span.start + keys)

    def context_slots(self, sessions: Sequence[Session], lengths: list[int], dtype: torch.dtype):
        """Slots [batch, keys] of every session's context incl. the new token, and the additive
        padding mask [batch, 1, 1, keys] (built once a step)."""
        slots = self.slot_table(sessions)
        keys = torch.arange(slots.shape[1], device=self.device)
        limit = torch.tensor(lengths, dtype=torch.long, device=self.device)[:, None]
        mask = torch.zeros(len(sessions), 1, 1, slots.shape[1], dtype=dtype, device=self.device)
        mask.masked_fill_((keys[None, :] > limit)[:, None, None, :], float("-inf"))
        return slots, mask

    def slot_table(self, sessions: Sequence[Session], keys: int = 0) -> torch.Tensor:
        """Slots [batch, keys'] of every session's blocks, at least ``keys`` of them: padding repeats a
        session's first block (its values are finite; the attention hides them)."""
        bs = self.block_size
        width = max(max(len(s.block_table) for s in sessions), -(-keys // bs))
        table = torch.tensor([s.block_table + s.block_table[:1] * (width - len(s.block_table)) for s in sessions],
                             dtype=torch.long, device=self.device)
        offsets = torch.arange(bs, device=self.device)
        return (table[:, :, None] * bs + offsets).view(len(sessions), width * bs)

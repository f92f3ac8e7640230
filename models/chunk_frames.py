"""Chunks as bytes: the framing every runtime's chunks share, and a range of pooled rows as bytes.

A chunk is ``u64 kv_len, u64 aux_len`` (little-endian), then ``kv_len`` bytes of per-token state
(the pool's rows of the chunk's tokens, C order, in the runtime dtype), then ``aux_len`` bytes of
auxiliary state at the chunk's end: none for a runtime whose whole state is per token, the state a
family keeps besides (a hybrid's linear layers, DeepSeek V4's entries and tails) otherwise.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from kvgate.core.runtime import Session
from kvgate.models.paged_kv import PagedKV

CHUNK_HEADER_BYTES = 16  # u64 kv_len, u64 aux_len


def framed_chunk(kv: bytes, aux: bytes = b"") -> bytes:
    """A chunk: its header, the per-token state, then the auxiliary state."""
    return len(kv).to_bytes(8, "little") + len(aux).to_bytes(8, "little") + kv + aux


def chunk_parts(data: bytes) -> tuple[memoryview, memoryview]:
    """(per-token state, auxiliary state) of a chunk, its header checked against its length."""
    head = CHUNK_HEADER_BYTES
    if len(data) < head:
        raise ValueError(f"a chunk needs a {head}-byte header, got {len(data)} bytes")
    kv_len, aux_len = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:16], "little")
    if head + kv_len + aux_len != len(data):
        raise ValueError(f"chunk of {len(data)} bytes, its header describes {head + kv_len + aux_len}")
    view = memoryview(data)
    return view[head:head + kv_len], view[head + kv_len:]


def export_rows(paged: PagedKV, session: Session, start: int = 0, end: Optional[int] = None) -> bytes:
    """The pooled rows of tokens [start, end) of ``session`` as bytes."""
    end = session.length if end is None else end
    if not 0 <= start <= end <= session.length:
        raise ValueError(f"bad token range [{start}, {end}) for a session of {session.length} tokens")
    rows = paged.pool.read(paged.slots(session, start, end))
    return rows.contiguous().cpu().view(torch.uint8).numpy().tobytes()


@torch.inference_mode()
def import_rows(paged: PagedKV, session: Session, tokens: Sequence[int], data: bytes) -> None:
    """Append ``tokens`` with their rows ``data`` (from :func:`export_rows`); the session is unchanged
    when ``data`` does not fit."""
    count = len(tokens)
    expected = count * paged.pool.bytes_per_token
    if len(data) != expected:
        raise ValueError(f"state of {count} tokens must be {expected} bytes, got {len(data)}")
    if count == 0:
        return
    paged.token_tensor(tokens)
    paged.check_room(session, count)
    rows = paged.pool.rows_from_bytes(torch.frombuffer(bytearray(data), dtype=torch.uint8), count)
    start = session.length
    paged.reserve([session], count)
    paged.pool.write(paged.slots(session, start, start + count), rows)
    session.tokens.extend(int(t) for t in tokens)

"""Allowed-token sets as numpy bool arrays, and writing them into a logits row.

A grammar mask arrives as a packed bitmask (bit ``i`` set: token ``i`` allowed). Narrowing never
empties a set: a ban that would leave nothing is skipped (an overlay may only remove tokens, and
never all of them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # torch is imported where a row is written: the schema worker never imports it
    import torch

SPARSE_LIMIT = 256  # below this many allowed tokens, copy them out instead of masking the row


def bitmask_words(vocab: int) -> int:
    return (vocab + 31) // 32


def unpack(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    return np.unpackbits(bitmask.view(np.uint8), bitorder="little", count=vocab).view(np.bool_)


def narrow(allowed: Optional[np.ndarray], banned: Sequence[int], vocab: int) -> tuple[Optional[np.ndarray], bool]:
    """``allowed`` without ``banned``; (mask, whether anything was removed). None means everything."""
    ids = np.asarray([t for t in banned if 0 <= t < vocab], dtype=np.int64)
    if ids.size == 0:
        return allowed, False
    if allowed is None:
        if ids.size >= vocab:
            return allowed, False
        out = np.ones(vocab, dtype=np.bool_)
        out[ids] = False
        return out, True
    hit = allowed[ids]
    if not hit.any():
        return allowed, False
    out = allowed.copy()
    out[ids] = False
    if not out.any():
        return allowed, False
    return out, True


def only(token: int, vocab: int) -> np.ndarray:
    out = np.zeros(vocab, dtype=np.bool_)
    out[token] = True
    return out


def write_mask(logits: torch.Tensor, allowed: Optional[np.ndarray]) -> None:
    """Set every logit whose token is not allowed to -inf, in place (any device)."""
    import torch

    vocab = allowed.shape[0] if allowed is not None else logits.shape[-1]
    if logits.shape[-1] > vocab:
        logits[vocab:] = float("-inf")
    if allowed is None:
        return
    row = logits[:vocab] if logits.shape[-1] >= vocab else logits
    allowed = allowed[: row.shape[-1]]
    count = int(np.count_nonzero(allowed))
    if count <= SPARSE_LIMIT:
        ids = torch.from_numpy(np.flatnonzero(allowed)).to(row.device)
        kept = row.index_select(0, ids)
        row.fill_(float("-inf"))
        row.index_copy_(0, ids, kept)
        return
    banned = torch.from_numpy(~allowed)
    if row.device.type != "cpu":
        banned = banned.to(row.device, non_blocking=True)
    row.masked_fill_(banned, float("-inf"))

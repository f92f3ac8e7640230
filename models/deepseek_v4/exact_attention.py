"""DeepSeek V4's attention of :func:`~.attention.attend` in the deterministic mode: a query's output
has the same bits whatever else is in the call (other queries, a batch's other sessions, the number
of entries a longer prefill has pooled).

Every shape the arithmetic depends on is fixed per query: its window keys are always ``window``
slots; a CSA query's chosen entries are padded to ``index_topk``; an HCA query's logits against the
shared entries come from :func:`~kvgate.models.invariant_dots.invariant_dots` and their values are
mixed in tiles of :data:`ENTRY_TILE` entries (zero-padded, added in order). The softmax row is
``[sink, window, entries]`` padded with hidden logits to a multiple of :data:`ROW_BLOCK`: a hidden
logit adds an exact zero, and every visible one sits at the same place in the row in every call.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from kvgate.models.invariant_dots import invariant_dots
from kvgate.models.invariant_linear import invariant_linear

ROW_BLOCK = 64  # a multiple of every vector width times unroll of the CPU softmax kernel
ENTRY_TILE = 256


def exact_attend(q: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor, entries: Optional[torch.Tensor],
                 entry_mask: Optional[torch.Tensor], sinks: torch.Tensor, top_k: int) -> torch.Tensor:
    """:func:`~.attention.attend`'s result: q [n, heads, dim] over the window ``keys`` [n, window, dim]
    (``key_mask`` [n, window]) and ``entries`` -- shared [E, dim] or per query [n, k <= top_k, dim]
    -- (``entry_mask`` [n, E or k]); a compressed layer passes entries even when there are none yet."""
    n, heads, dim = q.shape
    qf, hidden = q.float(), float("-inf")
    row = [sinks.float().view(1, -1, 1).expand(n, -1, 1),
           torch.einsum("nhd,nwd->nhw", qf, keys.float()).masked_fill(~key_mask[:, None], hidden) * dim ** -0.5]
    if entries is not None and entries.dim() == 3:
        entries, entry_mask = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, top_k - t.shape[1])) for t in (entries, entry_mask))
        row.append(torch.einsum("nhd,ned->nhe", qf, entries.float()))
    elif entries is not None:
        row.append(invariant_dots(qf.reshape(n * heads, dim), entries.float()).view(n, heads, -1))
    if entries is not None:
        row[2] = row[2].masked_fill(~entry_mask[:, None], hidden) * dim ** -0.5
    logits = torch.cat(row, -1)
    probs = F.pad(logits, (0, -logits.shape[-1] % ROW_BLOCK), value=hidden).softmax(-1).to(q.dtype)
    window = keys.shape[1]
    out = torch.einsum("nhw,nwd->nhd", probs[..., 1:1 + window], keys)
    if entries is None:
        return out
    entry_probs = probs[..., 1 + window:1 + window + entries.shape[-2]]
    if entries.dim() == 3:
        return out + torch.einsum("nhe,ned->nhd", entry_probs, entries)
    return out + mixed_entries(entry_probs.reshape(n * heads, -1), entries).view(n, heads, dim)


def mixed_entries(probs: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
    """``probs @ entries`` [R, dim] of probs [R, E] and entries [E, dim]: a fixed-shape product per
    tile of :data:`ENTRY_TILE` entries, the tiles added in order (a zero tile adds nothing)."""
    count = entries.shape[0]
    pad = max(-count % ENTRY_TILE, ENTRY_TILE if count == 0 else 0)
    probs, entries = F.pad(probs, (0, pad)), F.pad(entries, (0, 0, 0, pad))
    total = None
    for start in range(0, entries.shape[0], ENTRY_TILE):
        part = invariant_linear(probs[:, start:start + ENTRY_TILE].contiguous(),
                                entries[start:start + ENTRY_TILE].t().contiguous())
        total = part if total is None else total + part
    return total

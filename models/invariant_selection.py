"""Batch- and split-invariant attention over the keys each query selects (DeepSeek Sparse Attention
in the deterministic mode).

The selection is a boolean mask [B, n, keys]: key j (at absolute position j) joins query i's softmax
where it is set. On CPU it runs torch's flash kernel as :mod:`kvgate.models.invariant_attention`
does, with the shapes its per-row arithmetic depends on held fixed: keys padded to whole
:data:`KEY_BLOCK` blocks (hidden), query rows padded to :func:`padded_rows` (the padding rows see
what the last row sees). A prefill's queries are rows of one call per KV head (all its query heads
on the head dimension); a decode step stacks each token's query heads as rows. A selected-out key
adds an exact zero, so a row's bits depend on its query, its selection and the keys only. Elsewhere
(CUDA) it is :func:`kvgate.models.invariant_tiles.tiled_attention` with the selection as its mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_attention import QUERY_CHUNK, padded_keys, padded_rows
from kvgate.models.invariant_tiles import tiled_attention

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def selected_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """q [B, n, heads, dim] over k, v [B, keys, kv_heads, dim] where ``selected`` [B, n, keys] is set.
    Returns q's shape and dtype."""
    if q.device.type != "cpu":
        positions = torch.full(selected.shape[:2], selected.shape[-1] - 1, device=q.device)
        return tiled_attention(q, k, v, positions, visible=selected)
    keys = padded_keys(selected.shape[-1])
    mask = torch.zeros(selected.shape, dtype=q.dtype, device=q.device).masked_fill_(~selected, float("-inf"))
    mask = F.pad(mask, (0, keys - mask.shape[-1]), value=float("-inf"))[:, None]  # [B, 1, n, keys]
    k_t, v_t = (F.pad(t, (0, 0, 0, 0, 0, keys - t.shape[1])).transpose(1, 2) for t in (k, v))
    if q.shape[1] == 1:
        return _stacked(q, k_t, v_t, mask)
    parts = [_per_head(q[:, s:s + QUERY_CHUNK], k_t, v_t, mask[:, :, s:s + QUERY_CHUNK])
             for s in range(0, q.shape[1], QUERY_CHUNK)]
    return torch.cat(parts, 1)


def _stacked(q: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One query per batch row: its query heads of one KV group stacked as rows."""
    batch, _, heads, dim = q.shape
    kv_heads, keys = k_t.shape[1], k_t.shape[2]
    group = heads // kv_heads
    rows = padded_rows(group)
    stacked = F.pad(q.view(batch, kv_heads, group, dim), (0, 0, 0, rows - group))
    out = _flash(stacked, k_t, v_t, attn_mask=mask.expand(batch, kv_heads, rows, keys))[0]
    return out[:, :, :group].reshape(batch, 1, heads, dim)


def _per_head(q: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Queries as rows, one call per KV head with its group's query heads on the head dimension."""
    batch, n, heads, dim = q.shape
    kv_heads, keys = k_t.shape[1], k_t.shape[2]
    group, rows = heads // kv_heads, padded_rows(n)
    rows_q = F.pad(q, (0, 0, 0, 0, 0, rows - n)).transpose(1, 2)  # [B, heads, rows, dim]
    mask = torch.cat([mask, mask[:, :, -1:].expand(batch, 1, rows - n, keys)], 2)  # padding sees the last row's keys
    outs = []
    for h in range(kv_heads):
        shared = lambda t: t[:, h:h + 1].expand(batch, group, keys, dim)  # noqa: E731
        outs.append(_flash(rows_q[:, h * group:(h + 1) * group], shared(k_t), shared(v_t),
                           attn_mask=mask.expand(batch, group, rows, keys))[0])
    return torch.cat(outs, 1)[:, :, :n].transpose(1, 2)

"""Batch- and split-invariant attention in plain torch ops, fixed tiles: the path off CPU.

:func:`kvgate.models.invariant_attention.invariant_attention` runs this where torch's CPU flash
kernel is not available. A query's output depends only on its own query vector and the keys and
values it may see, never on how many other queries share the call, where a prefill was split, or how
far a batch pads its keys. Then a token computed in a one-forward prefill, in a chunk, as a cache
hit's append or as a decode step, alone or in a batch, gets bit-identical K/V and logits (the
model's linear layers are row-invariant on their own; ``tests/models/test_invariant_attention.py``
checks both on this machine's math library).

The arithmetic is fp32, with every shape the math library's rounding depends on held fixed:

- query rows (a token's query heads of one KV group, stacked) are padded to a multiple of
  ``ROW_TILE``, and keys, counted from absolute position 0, to a multiple of ``KEY_TILE``;
- scores are one matmul whose reduction runs over the head dimension only;
- the softmax subtracts the maximum over all visible keys, which is exact in any order;
- each key tile's probability sum and P @ V reduce over exactly ``KEY_TILE`` keys;
- tiles are combined by a pairwise tree in absolute tile order. A tile a query cannot see holds
  exact zeros, so the padding tiles of a longer call never change the sum.

A prefill's queries go in chunks of ``QUERY_CHUNK`` tokens, each over the keys up to its last
position, to bound the score matrix.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from kvgate.models.invariant_elementwise import invariant

ROW_TILE = 16
KEY_TILE = 256
QUERY_CHUNK = 128


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                    window: Optional[int] = None, sinks: Optional[torch.Tensor] = None,
                    visible: Optional[torch.Tensor] = None) -> torch.Tensor:
    """q [B, n, heads, dim] over k, v [B, keys, kv_heads, dim], key j at absolute position j;
    ``positions`` [B, n]: a query sees the keys at or before its position (and with ``window``, only
    the last ``window`` of them). ``sinks`` [heads]: a logit per query head that joins the softmax's
    denominator only (gpt-oss). ``visible`` [B, n, keys]: instead, the keys each query sees (a sparse
    selection). Returns q's shape and dtype."""
    n = q.shape[1]
    keys = min(k.shape[1], int(positions.max()) + 1)
    length = -(-keys // KEY_TILE) * KEY_TILE
    k_t, v_t = (_pad_keys(t[:, :keys], length) for t in (k, v))  # [B, kv, L, dim] fp32, once per call
    batch, kv_heads, _, dim = k_t.shape
    k_t = k_t.view(batch, kv_heads, -1, KEY_TILE, dim).transpose(-1, -2).contiguous()  # [B, kv, T, dim, TILE]
    v_t = v_t.view(batch, kv_heads, -1, KEY_TILE, dim)  # [B, kv, T, TILE, dim]
    if n <= QUERY_CHUNK:
        return _attend(q, k_t, v_t, positions, window, sinks, visible)
    parts = [_attend(q[:, s:s + QUERY_CHUNK], k_t, v_t, positions[:, s:s + QUERY_CHUNK], window, sinks,
                     None if visible is None else visible[:, s:s + QUERY_CHUNK]) for s in range(0, n, QUERY_CHUNK)]
    return torch.cat(parts, 1)


def _attend(q: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, positions: torch.Tensor,
            window: Optional[int] = None, sinks: Optional[torch.Tensor] = None,
            visible: Optional[torch.Tensor] = None) -> torch.Tensor:
    batch, n, heads, dim = q.shape
    kv_heads = k_t.shape[1]
    group = heads // kv_heads
    tiles = min(k_t.shape[2], -(-(int(positions.max()) + 1) // KEY_TILE))
    rows = n * group
    padded_rows = -(-rows // ROW_TILE) * ROW_TILE
    stacked = q.view(batch, n, kv_heads, group, dim).permute(0, 2, 1, 3, 4).reshape(batch, kv_heads, rows, dim)
    stacked = F.pad(stacked.float() * (1.0 / math.sqrt(dim)), (0, 0, 0, padded_rows - rows))
    row_positions = F.pad(positions.repeat_interleave(group, 1), (0, padded_rows - rows), value=-1)
    scores = stacked[:, :, None] @ k_t[:, :, :tiles]  # [B, kv, T, R, KEY_TILE]
    first = 0 if window or visible is not None else max(int(positions.min()) + 1, 0) // KEY_TILE  # tiles before it are visible to all
    keys = torch.arange(first * KEY_TILE, tiles * KEY_TILE, device=q.device).view(-1, 1, KEY_TILE)
    hidden = keys[None, :] > row_positions[:, None, :, None]  # [B, T - first, R, KEY_TILE]
    if window:
        hidden |= keys[None, :] <= row_positions[:, None, :, None] - window
    if visible is not None:  # a token's query heads share its selection; padding rows see nothing
        shown = F.pad(visible[..., :tiles * KEY_TILE].repeat_interleave(group, 1),
                      (0, tiles * KEY_TILE - min(visible.shape[-1], tiles * KEY_TILE), 0, padded_rows - rows))
        hidden = ~shown.view(batch, padded_rows, tiles, KEY_TILE).transpose(1, 2)[:, first:]
    scores[:, :, first:].masked_fill_(hidden[:, None], float("-inf"))
    top = scores.amax(dim=(2, 4), keepdim=True)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    probs = scores.sub_(top).exp_()
    sums = _tree_sum(probs.sum(-1, keepdim=True))  # [B, kv, R, 1]
    if sinks is not None:  # each row's head's sink logit, against the same maximum as its scores
        sink_rows = sinks.float().view(kv_heads, 1, group).expand(kv_heads, n, group).reshape(kv_heads, rows)
        sums = sums + invariant(torch.exp, F.pad(sink_rows, (0, padded_rows - rows))[..., None] - top[:, :, 0])
    out = _tree_sum(probs @ v_t[:, :, :tiles]) / sums.clamp_min(torch.finfo(torch.float32).tiny)  # [B, kv, R, dim]
    out = out[:, :, :rows].view(batch, kv_heads, n, group, dim).permute(0, 2, 1, 3, 4)
    return out.reshape(batch, n, heads, dim).to(q.dtype)


def _pad_keys(t: torch.Tensor, length: int) -> torch.Tensor:
    """[B, keys, kv, dim] -> [B, kv, length, dim] in fp32, zero-padded past the last key."""
    t = t.transpose(1, 2).float()
    return F.pad(t, (0, 0, 0, length - t.shape[2]))


def _tree_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over dim 2 (the key tiles) by pairs in tile order: (0+1)+(2+3)... A trailing zero tile
    adds exactly nothing, so the result does not depend on how many zero tiles follow."""
    while x.shape[2] > 1:
        if x.shape[2] % 2:
            x = torch.cat([x, torch.zeros_like(x[:, :, :1])], 2)
        pairs = x.view(*x.shape[:2], x.shape[2] // 2, 2, *x.shape[3:])
        x = pairs[:, :, :, 0] + pairs[:, :, :, 1]
    return x[:, :, 0]

"""Gemma 4 attention over the pool: unscaled scores (its q/k norms stand in for 1/sqrt(d)), causal
in full layers, and in sliding layers only the last ``window`` keys, a query's own included
(transformers: key position > query position - window).

:class:`Attention` is one forward's attention for one layer type, built once and called per layer:
SDPA with additive masks, or in the deterministic mode the batch- and split-invariant attention of
:mod:`kvgate.models.invariant_attention` (the sliding layers through its masked-rows path with the
window in the mask; its softmax scale 1/sqrt(d) is undone by scaling the queries first).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from kvgate.models.invariant_attention import (InvariantAttention, _attend_rows, _keys, padded_keys,
                                               padded_rows)


def hidden_keys(query_positions: torch.Tensor, keys: int, window: Optional[int]) -> torch.Tensor:
    """[..., keys] True where a query at ``query_positions`` [...] may not see key j (at position j)."""
    key_positions = torch.arange(keys, device=query_positions.device)
    later = key_positions > query_positions[..., None]
    if window is None:
        return later
    return later | (key_positions <= query_positions[..., None] - window)


def additive(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, float("-inf"))


class Attention:
    """``window``: the sliding window, or None in full layers; ``positions`` [batch, n] of the queries."""

    def __init__(self, positions: torch.Tensor, window: Optional[int], heads: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, deterministic: bool, padding: Optional[torch.Tensor] = None):
        self.positions, self.window, self.heads, self.kv_heads = positions, window, heads, kv_heads
        self.head_dim, self.dtype, self.deterministic = head_dim, dtype, deterministic
        self.padding = padding  # decode: [batch, 1, 1, keys] additive mask of padding keys
        self.invariant = None
        if deterministic:
            kind = InvariantAttention if window is None else WindowedInvariantAttention
            self.invariant = kind(positions, heads // kv_heads, dtype)
            self.invariant.window = window
        self.masks: dict[int, tuple[int, torch.Tensor]] = {}  # keys -> (first key read, additive mask)

    def prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [n, heads, dim] over k, v [keys, kv_heads, dim] (keys at positions 0..); [n, heads, dim]."""
        if self.invariant is not None:
            return self.invariant(q[None] * math.sqrt(self.head_dim), k[None], v[None])[0]
        first, mask = self._mask(k.shape[0])
        q_h, k_h, v_h = q.transpose(0, 1)[None], k[first:].transpose(0, 1)[None], v[first:].transpose(0, 1)[None]
        out = F.scaled_dot_product_attention(q_h, k_h, v_h, attn_mask=mask, scale=1.0, enable_gqa=True)
        return out[0].transpose(0, 1)

    def _mask(self, keys: int) -> tuple[int, torch.Tensor]:
        """The first key any query sees (a sliding layer need not read older ones) and the mask from it."""
        if keys not in self.masks:
            positions = self.positions[0]
            first = max(0, int(positions[0]) - self.window + 1) if self.window else 0
            hidden = hidden_keys(positions, keys, self.window)[:, first:]
            self.masks[keys] = first, additive(hidden, self.dtype)
        return self.masks[keys]

    def decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [batch, heads, dim] over k, v [batch, keys, kv_heads, dim]; [batch, heads * dim]."""
        batch = q.shape[0]
        if self.invariant is not None:
            q = q.view(batch, 1, self.heads, self.head_dim) * math.sqrt(self.head_dim)
            return self.invariant(q, k, v).reshape(batch, -1)
        grouped = q.view(batch, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
        out = F.scaled_dot_product_attention(grouped, k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=self._decode_mask(k.shape[1]), scale=1.0)
        return out.reshape(batch, -1)

    def _decode_mask(self, keys: int) -> Optional[torch.Tensor]:
        if self.window is None:
            return self.padding
        if keys not in self.masks:
            mask = additive(hidden_keys(self.positions[:, 0], keys, self.window), self.dtype)[:, None, None]
            self.masks[keys] = 0, mask if self.padding is None else mask + self.padding
        return self.masks[keys][1]


class WindowedInvariantAttention(InvariantAttention):
    """:class:`InvariantAttention` over a sliding window: every call through the masked-rows path,
    the mask hiding the keys before the window as well as after the query (on CPU only)."""

    window: int

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.device.type != "cpu":
            raise RuntimeError("the deterministic sliding-window attention runs on CPU only")
        return super().__call__(q, k, v)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: int) -> torch.Tensor:
        if first not in self.masks:
            positions = self.positions[:, first:first + q.shape[1]]
            keys = padded_keys(int(positions.max()) + 1)
            rows = positions.repeat_interleave(self.group, 1)
            rows = F.pad(rows, (0, padded_rows(rows.shape[1]) - rows.shape[1]), value=int(positions.max()))
            self.masks[first] = False, additive(hidden_keys(rows, keys, self.window), self.dtype)[:, None]
        mask = self.masks[first][1]
        keys = mask.shape[-1]
        return _attend_rows(q, _keys(k, keys), _keys(v, keys), mask)

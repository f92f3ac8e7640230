"""Attention with sinks, causal or over a sliding window, for prefill and batched decode.

A sink is a learned logit per query head that joins the softmax's denominator and adds no value:
``p_j = exp(s_j) / (sum_i exp(s_i) + exp(sink))``. It runs inside one SDPA call as one more key
with a zero value: every head dimension gets one extra coordinate, ``sink / scale`` on the query
(per head) and 1 on the sink key (0 on the real keys), so the sink key scores exactly ``sink``.

Keys are always the cached K/V of consecutive positions; a sliding layer is given only the keys
its window can reach and the mask hides the rest (the pool keeps every layer's full K/V, so a
session can still be cut at any token).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def hidden_keys(query_positions: torch.Tensor, first_key: int, keys: int, window: Optional[int]) -> torch.Tensor:
    """Which keys each query may not see: ``[batch, 1, queries, keys]`` (True: hidden) for queries
    at ``query_positions`` ``[batch, queries]`` over keys at positions [first_key, first_key + keys)."""
    key_positions = torch.arange(first_key, first_key + keys, device=query_positions.device)
    queries = query_positions[:, None, :, None]
    hidden = key_positions > queries
    if window is not None:
        hidden |= key_positions <= queries - window
    return hidden


def additive_mask(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``hidden`` as an additive mask with one more, always visible, key: the sink."""
    mask = torch.zeros(*hidden.shape[:-1], hidden.shape[-1] + 1, dtype=dtype, device=hidden.device)
    mask[..., :-1].masked_fill_(hidden, float("-inf"))
    return mask


def sink_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """q ``[batch, heads, n, dim]`` over k, v ``[batch, kv_heads, keys, dim]`` with ``sinks``
    ``[heads]`` and an :func:`additive_mask` ``[batch or 1, 1, n, keys + 1]``: ``[batch, heads, n, dim]``."""
    batch, heads, n, dim = q.shape
    kv_heads = k.shape[1]
    scale = dim ** -0.5
    sink_column = (sinks / scale).to(q.dtype).view(1, heads, 1, 1).expand(batch, heads, n, 1)
    q_plus = torch.cat([q, sink_column], dim=-1)
    k_plus = F.pad(k, (0, 1, 0, 1))  # a zero coordinate for the keys, then the sink key (all zeros) ...
    k_plus[:, :, -1, -1] = 1  # ... whose extra coordinate is 1
    v_plus = F.pad(v, (0, 0, 0, 1))
    return F.scaled_dot_product_attention(q_plus, k_plus, v_plus, attn_mask=mask, scale=scale,
                                          enable_gqa=heads != kv_heads)

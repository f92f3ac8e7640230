"""Attention over a sparse selection of keys in the deterministic mode
(:mod:`kvgate.models.invariant_selection`): the values of masked SDPA, and a query's bits the same as
a prefill row, a decode row alone, in a batch over more keys, or with fewer queries beside it.
The tiled path (off CPU) runs here too, for its values."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_selection import selected_attention
from kvgate.models.invariant_tiles import tiled_attention

HEADS, DIM, KEYS = 8, 40, 700


def problem(seed: int = 0, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, KEYS, HEADS, DIM, generator=generator).to(dtype)
    k = torch.randn(1, KEYS, 1, DIM, generator=generator).to(dtype)
    causal = torch.arange(KEYS)[None, :] <= torch.arange(KEYS)[:, None]
    selected = causal & (torch.rand(KEYS, KEYS, generator=generator) < 0.3)
    selected |= torch.eye(KEYS, dtype=torch.bool)  # every query sees at least itself
    return q, k, selected[None]


def reference(q, k, selected):
    out = F.scaled_dot_product_attention(q.double().transpose(1, 2), k.double().transpose(1, 2),
                                         k.double().transpose(1, 2), attn_mask=selected[:, None], enable_gqa=True)
    return out.transpose(1, 2)


def test_values_match_masked_attention_in_float64():
    q, k, selected = problem()
    assert (selected_attention(q, k, k, selected).double() - reference(q, k, selected)).abs().max() < 2e-2
    q, k, selected = problem(1, torch.float32)
    tiled = tiled_attention(q, k, k, torch.full((1, KEYS), KEYS - 1), visible=selected)
    assert (tiled.double() - reference(q, k, selected)).abs().max() < 1e-4


def test_a_row_has_the_same_bits_in_a_prefill_a_chunk_a_decode_and_a_batch():
    q, k, selected = problem(2)
    whole = selected_attention(q, k, k, selected)
    for first, end in ((0, 5), (300, 301), (255, 513), (697, 700)):
        part = selected_attention(q[:, first:end], k[:, :end], k[:, :end], selected[:, first:end, :end])
        assert torch.equal(part, whole[:, first:end]), (first, end)
    rows = torch.tensor([640, 17, 433])
    keys = torch.randn(3, KEYS, 1, DIM).to(k.dtype)  # other sessions' tokens past each row's position
    for i, position in enumerate(rows.tolist()):
        keys[i, :position + 1] = k[0, :position + 1]
    batch = selected_attention(q[0, rows][:, None], keys, keys, selected[0, rows][:, None])
    assert torch.equal(batch[:, 0], whole[0, rows])

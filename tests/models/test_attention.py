"""Prefill attention (models/prefill_attention.py) against one masked SDPA call over the same keys."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kvgate.models.prefill_attention import PrefillAttention


def masked_reference(q, k, v, start):
    """q [n, heads, dim] over k, v [start+n, kv_heads, dim]: every prefix key, own keys causally."""
    n = q.shape[0]
    visible = torch.arange(start + n)[None, :] <= torch.arange(start, start + n)[:, None]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None].double(), k.transpose(0, 1)[None].double(),
                                         v.transpose(0, 1)[None].double(), attn_mask=visible, enable_gqa=True)
    return out[0].transpose(0, 1)


@pytest.mark.parametrize("heads, kv_heads", [(9, 3), (4, 4), (8, 2)])
@pytest.mark.parametrize("start, n", [(1, 1), (5, 1), (1, 7), (300, 64), (1000, 213), (37, 512)])
def test_an_append_attends_like_one_masked_call(heads, kv_heads, start, n):
    generator = torch.Generator().manual_seed(start * 1000 + n + heads)
    q = torch.randn(n, heads, 64, generator=generator)
    k = torch.randn(start + n, kv_heads, 64, generator=generator) * 2  # sharper softmax rows
    v = torch.randn(start + n, kv_heads, 64, generator=generator)
    attend = PrefillAttention(start, n, torch.float32, torch.device("cpu"), None)
    assert attend.split and attend.mask is None
    out = attend(q, k, v)
    assert out.shape == (n, heads, 64) and out.dtype == torch.float32
    assert (out.double() - masked_reference(q, k, v, start)).abs().max() < 1e-5


def test_bf16_append_returns_bf16_close_to_exact():
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(shape, generator=generator).bfloat16()
               for shape in ((40, 9, 64), (240, 3, 64), (240, 3, 64)))
    out = PrefillAttention(200, 40, torch.bfloat16, torch.device("cpu"), None)(q, k, v)
    assert out.dtype == torch.bfloat16
    assert (out.double() - masked_reference(q, k, v, 200)).abs().max() < 2e-2  # bf16 output rounding


def test_a_fresh_prefill_is_causal_and_keeps_bf16_below_the_fp32_threshold():
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(shape, generator=generator) for shape in ((50, 9, 64), (50, 3, 64), (50, 3, 64)))
    attend = PrefillAttention(0, 50, torch.bfloat16, torch.device("cpu"), 2048)
    assert not attend.split and attend.mask is None and attend.dtype == torch.bfloat16
    assert PrefillAttention(0, 3000, torch.bfloat16, torch.device("cpu"), 2048).dtype == torch.float32
    exact = PrefillAttention(0, 50, torch.float32, torch.device("cpu"), None)(q, k, v)
    assert (exact.double() - masked_reference(q, k, v, 0)).abs().max() < 1e-5

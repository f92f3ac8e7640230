"""Qwen3.5, Qwen3.5-MoE and Qwen3-Next weights in a packed format (``[model] weights`` int8 / int4).

As for Llama (:mod:`kvgate.models.llama.quantize`): every big projection takes the format (full
attention's q, k, v, o; the linear-attention in-projections and out-projection; the dense MLP and the
shared expert), the head goes int8 in either format, and the embedding lookup stays dense. Routed
experts stay dense as the dense MoE path keeps them (:mod:`kvgate.models.moe.experts` runs plain
products), so do the router, the shared expert's one-row gate, the conv kernel and the norms. A shape
the format cannot hold (int4 needs rows in 64s, columns in 32s) stays dense too.

A GGUF's Q4_0 / Q4_1 projections arrive as their 4-bit parts
(:class:`~kvgate.models.gguf_quant.Int4Parts`, :mod:`kvgate.models.gguf_hybrid_q4`) and pack as they
are, as Llama's do; the parts of a shape int4 cannot hold (a few value heads' ``b`` and ``a``) are
read as the dense weight they stand for.
"""

from __future__ import annotations

import torch

from kvgate.models.gguf_quant import Int4Parts
from kvgate.models.llama.quantize import HEAD_FORMATS, in_format
from kvgate.models.quant_linear import GROUP, Int4Weight
from kvgate.models.qwen3_5.weights import Qwen35Weights

LAYER_FIELDS = ("gate_up", "down")
LINEAR_FIELDS = ("qkv", "z", "b", "a", "out")
FULL_FIELDS = ("q", "k", "v", "o")
SHARED_FIELDS = ("gate_up", "down")


def _pack(part, fields: tuple[str, ...], fmt: str, dtype) -> None:
    if part is None:
        return
    for field in fields:
        value = getattr(part, field)
        if value is not None:
            setattr(part, field, in_format(_packable(value, dtype), fmt, dtype))


def _packable(value, dtype):
    """``value``, or the dense weight of 4-bit parts whose shape int4 cannot hold."""
    if not isinstance(value, Int4Parts) or Int4Weight.fits(value.shape):
        return value
    rows, cols = value.shape
    q = torch.stack([value.nibbles & 15, value.nibbles >> 4], -1).view(rows, cols // GROUP, GROUP).float()
    return ((q - 8) * value.scale[..., None] + value.zero[..., None]).view(rows, cols).to(dtype)


def quantize_weights(weights: Qwen35Weights, fmt: str) -> Qwen35Weights:
    """``weights`` with their big projections in ``fmt`` (changed in place, one weight at a time)."""
    if fmt == "bf16":
        return weights
    dtype = weights.embed.dtype
    for layer in weights.layers:
        _pack(layer, LAYER_FIELDS, fmt, dtype)
        _pack(layer.linear, LINEAR_FIELDS, fmt, dtype)
        _pack(layer.full, FULL_FIELDS, fmt, dtype)
        _pack(layer.shared, SHARED_FIELDS, fmt, dtype)
    weights.lm_head = in_format(weights.lm_head, HEAD_FORMATS[fmt], dtype)
    weights.format = fmt
    return weights

"""Qwen3.5, Qwen3.5-MoE and Qwen3-Next weights in a packed format (``[model] weights`` int8 / int4).

As for Llama (:mod:`kvgate.models.llama.quantize`): every big projection takes the format (full
attention's q, k, v, o; the linear-attention in-projections and out-projection; the dense MLP and the
shared expert), the head goes int8 in either format, and the embedding lookup stays dense. Routed
experts stay dense as the dense MoE path keeps them (:mod:`kvgate.models.moe.experts` runs plain
products), so do the router, the shared expert's one-row gate, the conv kernel and the norms. A shape
the format cannot hold (int4 needs rows in 64s, columns in 32s) stays dense too.
"""

from __future__ import annotations

from kvgate.models.llama.quantize import HEAD_FORMATS, in_format
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
            setattr(part, field, in_format(value, fmt, dtype))


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

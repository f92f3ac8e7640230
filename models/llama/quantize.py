"""Llama weights in a quantized format: the layers' linear weights and the head.

The linear weights (fused qkv, o, fused gate_up, down) take the format itself; 4-bit parts kept
from a GGUF (:class:`~kvgate.models.gguf_quant.Int4Parts`) pack as they are. The head (often the
tied embedding, Q8_0 in a GGUF) goes int8 in either format: int4 would cost it ~8 % weight error,
and its int8 matmul takes about half the time of a bf16 one (``bench/bench_weights.py``). The
embedding lookup itself stays dense but for a GGUF's kept blocks (:mod:`kvgate.models.gguf_kquant_embedding`).
GGUF Q8_0 / Q4_K / Q5_K / Q6_K / Q5_0 / Q5_1 weights (and an output head in those types, tied to such an
embedding or not: no int8 copy) stay the file's own blocks in either packed format
(:mod:`kvgate.models.gguf_kquant_weight`); the format is then named ``<fmt>+kquant``.
"""

from __future__ import annotations

from typing import Any

from kvgate.models.gguf_kquant_weight import KQuantWeight, StackedRows
from kvgate.models.gguf_quant import Int4Parts
from kvgate.models.llama.layers import LlamaWeights
from kvgate.models.quant_linear import quantize

LINEAR_FIELDS = ("qkv", "o", "gate_up", "down")
HEAD_FORMATS = {"int4": "int8", "int8": "int8", "bf16": "bf16"}


def in_format(value: Any, fmt: str, dtype) -> Any:
    """``value`` (a dense weight, 4-bit GGUF parts, K-quant blocks or None) in format ``fmt``."""
    if isinstance(value, (KQuantWeight, StackedRows)):
        return value.dequantize(dtype) if fmt == "bf16" else value
    if isinstance(value, Int4Parts):
        weight = value.weight()
        return weight if fmt == "int4" else quantize(weight.dequantize().to(dtype), fmt)
    return value if value is None else quantize(value, fmt)


def quantize_weights(weights: LlamaWeights, fmt: str) -> LlamaWeights:
    """``weights`` with their linear weights in ``fmt`` (changed in place, one weight at a time)."""
    dtype = weights.embed.dtype
    for layer in weights.layers:
        for field in LINEAR_FIELDS:
            setattr(layer, field, in_format(getattr(layer, field), fmt, dtype))
    weights.lm_head = in_format(weights.lm_head, HEAD_FORMATS[fmt], dtype)
    kept = [weights.lm_head] + [getattr(layer, field) for layer in weights.layers for field in LINEAR_FIELDS]
    weights.format = fmt + "+kquant" if any(isinstance(v, (KQuantWeight, StackedRows)) for v in kept) else fmt
    return weights

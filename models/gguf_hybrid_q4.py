"""A hybrid GGUF's Q4_0 / Q4_1 projections kept 4-bit through :mod:`kvgate.models.gguf_hybrid`'s renames
and reorders, as the dense families' are (:mod:`kvgate.models.gguf_quant`).

Every reorder there moves whole rows, or, for ``ssm_out``, whole value heads of columns. Moving rows
moves the same rows of the nibbles, scales and zeros; a value head of columns is ``v_dim / 32`` whole
groups, so its nibble columns move ``v_dim`` at a time and its scale and zero columns ``v_dim / 32``
at a time (a head width off the 32-column groups is dequantized instead). The kept projections are
those the hybrid runtime packs (:mod:`kvgate.models.qwen3_5.quantize`); routed experts, the router,
the conv kernel and the norms are dequantized as before.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from kvgate.models import gguf_hybrid
from kvgate.models.gguf_quant import q4_parts, stored_parts

GROUP = 32  # weights per Q4 block: one scale and zero each
KEPT = frozenset({"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                  "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "attn_qkv", "attn_gate",
                  "ssm_beta", "ssm_alpha", "ssm_ba", "ssm_out"})
COLUMN_REORDERED = "ssm_out"  # its value heads run along the columns


def kept_4bit(tensor, config: dict[str, Any], hf_name: Callable[[str], str]) -> dict[str, torch.Tensor]:
    """The stored 4-bit parts, under their Hugging Face names, of a hybrid layer's Q4_0 / Q4_1
    projection; empty for any other tensor (it is dequantized)."""
    match = gguf_hybrid.TENSOR.fullmatch(tensor.name)
    kind = match.group(2) if match else None
    if kind not in KEPT or (kind == COLUMN_REORDERED and config["linear_value_head_dim"] % GROUP):
        return {}
    parts = q4_parts(tensor.data, tensor.tensor_type.name)
    if parts is None:
        return {}
    q, scale, zero = parts
    nibbles = gguf_hybrid.hf_tensors(tensor.name, q, config, hf_name)
    grouped = _group_config(config) if kind == COLUMN_REORDERED else config
    scales = gguf_hybrid.hf_tensors(tensor.name, scale, grouped, hf_name)
    zeros = gguf_hybrid.hf_tensors(tensor.name, zero, grouped, hf_name)
    out: dict[str, torch.Tensor] = {}
    for name, part in nibbles.items():
        out.update(stored_parts(name, (part, scales[name], zeros[name])))
    return out


def _group_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as the scale and zero columns see it: a value head is ``v_dim / 32`` of them."""
    return dict(config, linear_value_head_dim=config["linear_value_head_dim"] // GROUP)


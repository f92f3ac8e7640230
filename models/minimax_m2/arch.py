"""MiniMax M2's architecture, read from its ``config.json``; what the runtime cannot serve exactly is refused."""

from __future__ import annotations

from typing import Any

import attrs

from kvgate.models.llama.layers import LlamaArch
from kvgate.models.moe.config import MoeConfig

MINIMAX_M2_NAMES = {"minimax_m2": "minimax_m2", "MiniMaxM2ForCausalLM": "minimax_m2"}


def minimax_m2_arch(config: dict[str, Any]) -> LlamaArch:
    """MiniMax M2: no attention biases; q/k norms over the whole projections (``use_qk_norm``,
    ``qk_norm_type`` "per_layer"); RoPE on ``partial_rotary_factor`` (or the legacy ``rotary_dim``)
    of each head; every layer a mixture of ``num_local_experts`` experts of width
    ``intermediate_size``, the top ``num_experts_per_tok`` by sigmoid score plus correction bias,
    weighted by their renormalised scores."""
    refuse_unserved(config)
    arch = LlamaArch.from_hf_config(config, MINIMAX_M2_NAMES)
    rotary = rotary_dims(config, arch.head_dim)
    if rotary < arch.head_dim and arch.rope_scaling is not None:
        raise ValueError("MiniMax M2 config.json: rope scaling with partial rotary (rotary_dim) is not supported")
    try:
        moe = MoeConfig(experts=int(config["num_local_experts"]), top_k=int(config["num_experts_per_tok"]),
                        intermediate_size=int(config["intermediate_size"]), sparse_layers=range(arch.layers),
                        scoring="sigmoid", norm_topk_prob=True)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad MiniMax M2 config.json: {exc!r}") from None
    return attrs.evolve(arch, qkv_bias=False, o_bias=False, qk_norm=True, rotary_dim=rotary, moe=moe)


def rotary_dims(config: dict[str, Any], head_dim: int) -> int:
    """The rotated dims of each head: ``rope_parameters.partial_rotary_factor`` when given (as
    transformers reads it), else ``rotary_dim``, else the whole head."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    factor = rope.get("partial_rotary_factor") or config.get("partial_rotary_factor")
    if factor is None:
        factor = int(config.get("rotary_dim") or head_dim) / head_dim
    rotary = int(head_dim * float(factor))
    if rotary % 2 or not 0 < rotary <= head_dim:
        raise ValueError(f"bad MiniMax M2 config.json: rotary dims {rotary} (rotary_dim / partial_rotary_factor) "
                         f"must be even and within head_dim {head_dim}")
    return rotary


def refuse_unserved(config: dict[str, Any]) -> None:
    """Config keys of MiniMax checkpoints that ask for more than full attention and routed experts."""
    if config.get("sliding_window") or config.get("use_sliding_window"):
        raise ValueError("MiniMax M2 config.json: sliding_window is not supported (every layer attends to all)")
    if any(int(kind) != 1 for kind in config.get("attn_type_list") or []):
        raise ValueError("MiniMax M2 config.json: attn_type_list names linear-attention layers (0); "
                         "only full attention (1) is supported")
    for key, wrong in (("use_qk_norm", False), ("attention_bias", True)):
        if key in config and bool(config[key]) == wrong:
            raise ValueError(f"MiniMax M2 config.json: {key} = {config[key]!r} is not supported")
    for key in ("shared_intermediate_size", "n_shared_experts"):
        if int(config.get(key) or 0):
            raise ValueError(f"MiniMax M2 config.json: {key} = {config[key]!r}: shared experts are not supported")
    expected = {"qk_norm_type": "per_layer", "scoring_func": "sigmoid", "hidden_act": "silu"}
    for key, value in expected.items():
        if config.get(key, value) != value:
            raise ValueError(f"MiniMax M2 config.json: {key} = {config[key]!r} is not supported (only {value!r})")
    for key, value in config.items():
        if key.startswith("layernorm_") and key.endswith(("_alpha", "_beta")) and value != 1:
            raise ValueError(f"MiniMax M2 config.json: {key} = {value!r}: scaled residuals are not supported")

"""GGUF to Hugging Face for the families past Llama: Qwen3's q/k norms, stacked experts, routers and
their correction biases, shared experts, GLM-4.5's partial rotary and dense first layers, DeepSeek
V3's MLA projections (``deepseek2``; ``attn_kv_b``, or the split ``attn_k_b`` / ``attn_v_b`` of newer
converters, kept as ``k_b_proj`` / ``v_b_proj`` for the DeepSeek loader).

llama.cpp stores a layer's experts as one tensor per projection (``ffn_{gate,up,down}_exps``,
``[experts, rows, cols]``); each becomes one Hugging Face tensor per expert. A layer without a
router (``ffn_gate_inp``) is dense. GLM's next-token-prediction layers (``nextn_predict_layers``,
the last blocks) are left out: this converter reads the main model only.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

LAYER_NAMES = {
    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate_inp": "mlp.gate",
    "post_attention_norm": "post_attention_layernorm", "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj", "ffn_down_shexp": "mlp.shared_experts.down_proj",
    "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm", "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa", "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj", "attn_k_b": "self_attn.k_b_proj", "attn_v_b": "self_attn.v_b_proj",
}
EXPERT_NAMES = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}
HF_CLASSES = {"qwen3": "Qwen3ForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM", "glm4moe": "Glm4MoeForCausalLM",
              "deepseek2": "DeepseekV3ForCausalLM"}
# where model_type differs from the GGUF name
HF_MODEL_TYPES = {"qwen3moe": "qwen3_moe", "glm4moe": "glm4_moe", "deepseek2": "deepseek_v3"}
SIGMOID_GATING = 2  # llama.cpp's expert_gating_func for sigmoid routers
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_tensors(gguf_name: str, values: np.ndarray, layers: int,
               hf_name: Callable[[str], str]) -> dict[str, np.ndarray]:
    """The Hugging Face tensors of one GGUF tensor (none for a layer at or past ``layers``)."""
    match = _LAYER_TENSOR.fullmatch(gguf_name) or re.fullmatch(r"blk\.(\d+)\.(nextn\.\w+)\.(weight)", gguf_name)
    if not match:
        return {hf_name(gguf_name): values}
    layer, kind, suffix = match.groups()
    prefix = f"model.layers.{layer}."
    if int(layer) >= layers:
        return {}
    if kind == "exp_probs_b":
        return {prefix + "mlp.gate.e_score_correction_bias": values}
    if kind in EXPERT_NAMES:
        return {f"{prefix}mlp.experts.{e}.{EXPERT_NAMES[kind]}.weight": values[e] for e in range(values.shape[0])}
    return {hf_name(gguf_name): values}


def family_config(meta: dict[str, Any], names: set[str], config: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face keys past the Llama ones: layers without GLM's MTP blocks, partial rotary,
    attention biases and q/k norms as the tensors show them, and the MoE keys."""
    arch = meta.get("general.architecture")
    layers = int(meta[f"{arch}.block_count"]) - int(meta.get(f"{arch}.nextn_predict_layers") or 0)
    out: dict[str, Any] = {"num_hidden_layers": layers}
    rotary = meta.get(f"{arch}.rope.dimension_count")
    if rotary and int(rotary) < config["head_dim"]:
        out["partial_rotary_factor"] = int(rotary) / config["head_dim"]
    if arch == "glm4moe":
        out.update(attention_bias="blk.0.attn_q.bias" in names, use_qk_norm="blk.0.attn_q_norm.weight" in names)
    if arch == "deepseek2":
        out.update(_mla_config(meta, arch))
    experts = meta.get(f"{arch}.expert_count")
    if not experts:
        return out
    shared = int(meta.get(f"{arch}.expert_shared_count") or 0)
    out.update({
        "num_experts": int(experts), "num_experts_per_tok": int(meta[f"{arch}.expert_used_count"]),
        "moe_intermediate_size": int(meta[f"{arch}.expert_feed_forward_length"]), "n_shared_experts": shared,
        # llama.cpp renormalises Qwen3-MoE's top-k weights unless told otherwise
        "norm_topk_prob": bool(meta.get(f"{arch}.expert_weights_norm", True)),
        "routed_scaling_factor": float(meta.get(f"{arch}.expert_weights_scale") or 1.0),
        "n_group": int(meta.get(f"{arch}.expert_group_count") or 1),
        "topk_group": int(meta.get(f"{arch}.expert_group_used_count") or 1),
        "mlp_only_layers": [i for i in range(layers) if f"blk.{i}.ffn_gate_inp.weight" not in names]})
    return out


def _mla_config(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    """DeepSeek V3's MLA sizes; llama.cpp keeps DeepSeek's interleaved rope order in the tensors."""
    if int(meta.get(f"{arch}.expert_gating_func") or SIGMOID_GATING) != SIGMOID_GATING:
        raise ValueError("deepseek2 GGUF with softmax expert gating (DeepSeek V2) is not supported")
    rope = int(meta[f"{arch}.rope.dimension_count"])
    key = meta.get(f"{arch}.attention.key_length_mla") or meta[f"{arch}.attention.key_length"]
    value = meta.get(f"{arch}.attention.value_length_mla") or meta[f"{arch}.attention.value_length"]
    return {"q_lora_rank": meta.get(f"{arch}.attention.q_lora_rank") or None,
            "kv_lora_rank": int(meta[f"{arch}.attention.kv_lora_rank"]), "qk_rope_head_dim": rope,
            "qk_nope_head_dim": int(key) - rope, "v_head_dim": int(value), "rope_interleave": True,
            "scoring_func": "sigmoid", "first_k_dense_replace": int(meta.get(f"{arch}.leading_dense_block_count") or 0)}

"""GGUF to Hugging Face for the hybrid families: Qwen3.5 (``qwen35``), Qwen3.5-MoE (``qwen35moe``) and
Qwen3-Next (``qwen3next``), undoing what llama.cpp's converter does to them.

llama.cpp stores ``-exp(A_log)`` as ``ssm_a``, ``dt_bias`` as ``ssm_dt.bias``, the conv kernel
squeezed to ``[channels, kernel]``, and every zero-centred RMSNorm weight (all but the linear layers'
gated norm) as its scale ``1 + w``. For Qwen3-Next it splits ``in_proj_qkvz`` into ``attn_qkv`` (all
q, then all k, then all v: Qwen3.5's ``in_proj_qkv``) and ``attn_gate`` (z) and keeps ``in_proj_ba``
fused per key head (``ssm_ba``). For Qwen3.5 and Qwen3.5-MoE it reorders the value heads from grouped
by key head to tiled (``[k0 v0, k1 v0, ..., k0 v1, ...]``) in every tensor that has them; that is
undone here. A Qwen3.5 MTP block (past ``block_count - nextn_predict_layers``) is left.
:mod:`kvgate.models.gguf_hybrid_q4` runs the same renames and reorders on Q4 projections' 4-bit parts.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from kvgate.models import gguf_experts

HF_CLASSES = {"qwen35": "Qwen3_5ForCausalLM", "qwen35moe": "Qwen3_5MoeForCausalLM",
              "qwen3next": "Qwen3NextForCausalLM"}
HF_MODEL_TYPES = {"qwen35": "qwen3_5_text", "qwen35moe": "qwen3_5_moe_text", "qwen3next": "qwen3_next"}
TILED = {"qwen3_5_text", "qwen3_5_moe_text"}  # model types whose value heads llama.cpp tiles
PLAIN = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ssm_norm": "linear_attn.norm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "ffn_gate_inp": "mlp.gate",
         "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
         "ffn_down_shexp": "mlp.shared_expert.down_proj"}
SCALES = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
          "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}  # stored as 1 + w
TENSOR = re.compile(r"blk\.(\d+)\.(\w+?)(?:\.(weight|bias))?")


def family_config(meta: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The linear-attention keys (llama.cpp's ``ssm.*``), the layer pattern and the shared expert."""
    arch = meta["general.architecture"]
    v_heads = int(meta[f"{arch}.ssm.time_step_rank"])
    out = {"linear_conv_kernel_dim": int(meta[f"{arch}.ssm.conv_kernel"]),
           "linear_key_head_dim": int(meta[f"{arch}.ssm.state_size"]),
           "linear_num_key_heads": int(meta[f"{arch}.ssm.group_count"]), "linear_num_value_heads": v_heads,
           "linear_value_head_dim": int(meta[f"{arch}.ssm.inner_size"]) // v_heads,
           "full_attention_interval": int(meta.get(f"{arch}.full_attention_interval") or 4)}
    shared = meta.get(f"{arch}.expert_shared_feed_forward_length")
    if shared:
        out["shared_expert_intermediate_size"] = int(shared)
    return out


def hf_tensors(gguf_name: str, values: np.ndarray, config: dict[str, Any],
               hf_name: Callable[[str], str]) -> dict[str, np.ndarray]:
    """The Hugging Face tensors of one GGUF tensor of a hybrid model (none for an MTP block)."""
    if gguf_name == "output_norm.weight":
        return {"model.norm.weight": values - 1}
    match = TENSOR.fullmatch(gguf_name)
    if not match or "_exps" in gguf_name:
        if match and match.group(2) == "ffn_gate_up_exps":
            return _split_gate_up(match.group(1), values, config)
        return gguf_experts.hf_tensors(gguf_name, values, config["num_hidden_layers"], hf_name)
    layer, kind, suffix = match.groups()
    if int(layer) >= config["num_hidden_layers"]:
        return {}
    p = f"model.layers.{layer}."
    if kind in PLAIN:
        return {f"{p}{PLAIN[kind]}.{suffix}": values}
    if kind in SCALES:
        return {f"{p}{SCALES[kind]}.{suffix}": values - 1}
    if kind == "ffn_gate_inp_shexp":
        return {p + "mlp.shared_expert_gate.weight": values.reshape(1, -1)}
    return {p + "linear_attn." + name: part for name, part in _linear_attention(kind, values, config).items()}


def _linear_attention(kind: str, values: np.ndarray, config: dict[str, Any]) -> dict[str, np.ndarray]:
    k_heads, v_heads = config["linear_num_key_heads"], config["linear_num_value_heads"]
    k_dim, v_dim = config["linear_key_head_dim"], config["linear_value_head_dim"]
    grouped = _grouping(config)
    qk = 2 * k_heads * k_dim
    if kind == "attn_qkv":
        return {"in_proj_qkv.weight": np.concatenate([values[:qk], grouped(values[qk:], 0, v_dim)])}
    if kind == "attn_gate":
        return {"in_proj_z.weight": grouped(values, 0, v_dim)}
    if kind in ("ssm_beta", "ssm_alpha"):
        return {f"in_proj_{kind[4]}.weight": grouped(values, 0, 1)}
    if kind == "ssm_ba":  # Qwen3-Next: per key head its value heads' b, then their a
        per_key = values.reshape(k_heads, 2, v_heads // k_heads, -1)
        return {"in_proj_b.weight": per_key[:, 0].reshape(v_heads, -1),
                "in_proj_a.weight": per_key[:, 1].reshape(v_heads, -1)}
    if kind == "ssm_a":
        return {"A_log": np.log(-grouped(values.reshape(-1), 0, 1))}
    if kind == "ssm_dt":
        return {"dt_bias": grouped(values.reshape(-1), 0, 1)}
    if kind == "ssm_conv1d":
        conv = values.reshape(-1, values.shape[-1])
        return {"conv1d.weight": np.concatenate([conv[:qk], grouped(conv[qk:], 0, v_dim)])[:, None]}
    if kind == "ssm_out":
        return {"out_proj.weight": grouped(values, 1, v_dim)}
    raise ValueError(f"unexpected GGUF tensor kind {kind!r} in a {config['model_type']} model")


def _grouping(config: dict[str, Any]) -> Callable[[np.ndarray, int, int], np.ndarray]:
    """``(values, axis, head_dim)`` -> values with their value heads along ``axis`` grouped by key head
    again (unchanged for Qwen3-Next, whose heads llama.cpp leaves grouped)."""
    k_heads = config["linear_num_key_heads"]
    per_key = config["linear_num_value_heads"] // k_heads
    if config["model_type"] not in TILED or per_key == 1:
        return lambda values, axis, head_dim: values

    def grouped(values: np.ndarray, axis: int, head_dim: int) -> np.ndarray:
        moved = np.moveaxis(values, axis, 0)
        heads = moved.reshape(per_key, k_heads, head_dim, *moved.shape[1:]).swapaxes(0, 1)
        return np.moveaxis(heads.reshape(moved.shape), 0, axis)
    return grouped


def _split_gate_up(layer: str, values: np.ndarray, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """A fused ``ffn_gate_up_exps`` [experts, 2 * width, hidden] as each expert's gate and up."""
    if int(layer) >= config["num_hidden_layers"]:
        return {}
    gate, up = np.split(values, 2, axis=1)
    p = f"model.layers.{layer}.mlp.experts."
    return {name: part[e] for e in range(values.shape[0])
            for name, part in ((f"{p}{e}.gate_proj.weight", gate), (f"{p}{e}.up_proj.weight", up))}

"""Write a tiny Qwen3.5 / Qwen3.5-MoE / Qwen3-Next Hugging Face directory as a GGUF file the way
llama.cpp's ``convert_hf_to_gguf.py`` does (fp32 tensors): ``ssm_a = -exp(A_log)``, ``dt_bias`` as
``ssm_dt.bias``, the conv kernel squeezed, zero-centred norm weights as ``1 + w``, experts stacked;
Qwen3-Next's ``in_proj_qkvz`` split into ``attn_qkv`` / ``attn_gate``; Qwen3.5's value heads
reordered from grouped by key head to tiled."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tests.models.tiny_gguf import finish_gguf, layer_tensors

ARCHES = {"qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe", "qwen3_next": "qwen3next"}
_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
          "linear_attn.A_log": "ssm_a", "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.conv1d": "ssm_conv1d",
          "linear_attn.norm": "ssm_norm", "linear_attn.out_proj": "ssm_out", "linear_attn.in_proj_qkv": "attn_qkv",
          "linear_attn.in_proj_z": "attn_gate", "linear_attn.in_proj_b": "ssm_beta",
          "linear_attn.in_proj_a": "ssm_alpha", "linear_attn.in_proj_ba": "ssm_ba", "mlp.gate": "ffn_gate_inp",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
          "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
          "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}
_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}


def tiled(values: np.ndarray, axis: int, c: dict, head_dim: int) -> np.ndarray:
    """llama.cpp's ``_reorder_v_heads``: value heads grouped by key head -> tiled."""
    k_heads, per_key = c["linear_num_key_heads"], c["linear_num_value_heads"] // c["linear_num_key_heads"]
    moved = np.moveaxis(values, axis, 0)
    heads = moved.reshape(k_heads, per_key, head_dim, *moved.shape[1:]).swapaxes(0, 1)
    return np.moveaxis(heads.reshape(moved.shape), 0, axis)


def _linear(kind: str, value: np.ndarray, c: dict) -> dict[str, np.ndarray]:
    """llama.cpp's changes to one linear-attention tensor (HF name suffix ``kind``)."""
    qk, v_dim = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"], c["linear_value_head_dim"]
    tile = c["model_type"] != "qwen3_next"
    if kind == "in_proj_qkvz.weight":
        k_heads, k_dim = c["linear_num_key_heads"], c["linear_key_head_dim"]
        group = c["linear_num_value_heads"] // k_heads * v_dim
        q, k, v, z = np.split(value.reshape(k_heads, -1, value.shape[-1]), np.cumsum([k_dim, k_dim, group])[:3], 1)
        flat = [part.reshape(-1, value.shape[-1]) for part in (q, k, v, z)]
        return {"attn_qkv.weight": np.concatenate(flat[:3]), "attn_gate.weight": flat[3]}
    if kind == "A_log":
        value = -np.exp(value)
    if kind == "conv1d.weight":
        value = value[:, 0]
    if tile and kind in ("in_proj_qkv.weight", "conv1d.weight"):
        value = np.concatenate([value[:qk], tiled(value[qk:], 0, c, v_dim)])
    elif tile and kind in ("in_proj_z.weight", "out_proj.weight"):
        value = tiled(value, 1 if kind.startswith("out") else 0, c, v_dim)
    elif tile and kind in ("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias"):
        value = tiled(value, 0, c, 1)
    base = kind.removesuffix(".weight")
    return {_NAMES["linear_attn." + base] + ("" if kind in ("A_log", "dt_bias") else ".weight"): value}


def gguf_tensors(tensors: dict[str, np.ndarray], c: dict) -> dict[str, np.ndarray]:
    out = {"output_norm.weight": tensors.pop("model.norm.weight") + 1}
    for layer, rest, value in layer_tensors(tensors, _GLOBAL, out):
        if rest.startswith("linear_attn.") and not rest.startswith("linear_attn.norm"):
            for kind, part in _linear(rest.removeprefix("linear_attn."), value, c).items():
                out[f"blk.{layer}.{kind}"] = part
        else:
            base, suffix = rest.rsplit(".", 1)
            scale = base.endswith("norm") and base != "linear_attn.norm"
            out[f"blk.{layer}.{_NAMES[base]}.{suffix}"] = value + 1 if scale else value
    return out


def write_tiny_hybrid_gguf(directory: Path, path: Path, quantized=None) -> Path:
    """The GGUF twin of the tiny hybrid Hugging Face model in ``directory`` (``quantized``: as
    :func:`~tests.models.tiny_gguf.finish_gguf` takes it)."""
    import gguf

    c = json.loads((directory / "config.json").read_text())
    writer = gguf.GGUFWriter(str(path), ARCHES[c["model_type"]])
    for add, value in [(writer.add_block_count, c["num_hidden_layers"]),
                       (writer.add_context_length, c["max_position_embeddings"]),
                       (writer.add_embedding_length, c["hidden_size"]),
                       (writer.add_feed_forward_length, c["intermediate_size"]),
                       (writer.add_head_count, c["num_attention_heads"]),
                       (writer.add_head_count_kv, c["num_key_value_heads"]), (writer.add_key_length, c["head_dim"]),
                       (writer.add_value_length, c["head_dim"]), (writer.add_layer_norm_rms_eps, c["rms_norm_eps"]),
                       (writer.add_rope_freq_base, c["rope_parameters"]["rope_theta"]),
                       (writer.add_rope_dimension_count, int(c["head_dim"] * 0.25)),
                       (writer.add_ssm_conv_kernel, c["linear_conv_kernel_dim"]),
                       (writer.add_ssm_state_size, c["linear_key_head_dim"]),
                       (writer.add_ssm_group_count, c["linear_num_key_heads"]),
                       (writer.add_ssm_time_step_rank, c["linear_num_value_heads"]),
                       (writer.add_ssm_inner_size, c["linear_value_head_dim"] * c["linear_num_value_heads"]),
                       (writer.add_full_attention_interval, 4)]:
        add(value)
    if c.get("num_experts"):
        writer.add_expert_count(c["num_experts"])
        writer.add_expert_used_count(c["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(c["moe_intermediate_size"])
        writer.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    finish_gguf(writer, c, gguf_tensors(load_file(str(directory / "model.safetensors")), c), quantized)
    return path

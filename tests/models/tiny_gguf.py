"""Write a tiny Qwen3 / Qwen3-MoE Hugging Face directory as a GGUF file with the ``gguf`` package
(fp32 tensors, llama.cpp names and keys; experts stacked per layer, as llama.cpp stores them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from tests.models.tiny_models import VOCAB

_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
          "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}


def gguf_tensors(tensors: dict[str, np.ndarray], experts: int) -> dict[str, np.ndarray]:
    out, stacked = {}, {}
    for name, value in tensors.items():
        if name in _GLOBAL:
            out[_GLOBAL[name]] = value
            continue
        layer, rest = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name).groups()
        expert = re.fullmatch(r"mlp\.experts\.(\d+)\.(\w+)_proj", rest)
        if expert:
            stacked.setdefault((layer, expert.group(2)), {})[int(expert.group(1))] = value
        else:
            out[f"blk.{layer}.{_NAMES[rest]}.weight"] = value
    for (layer, kind), parts in stacked.items():
        out[f"blk.{layer}.ffn_{kind}_exps.weight"] = np.stack([parts[e] for e in range(experts)])
    return out


def write_tiny_gguf(directory: Path, path: Path) -> Path:
    """The GGUF twin of the tiny Hugging Face model in ``directory``."""
    import gguf

    config = json.loads((directory / "config.json").read_text())
    moe = config["model_type"] == "qwen3_moe"
    writer = gguf.GGUFWriter(str(path), "qwen3moe" if moe else "qwen3")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    experts = 0
    if moe:
        experts = config.get("num_experts") or config["num_local_experts"]
        writer.add_expert_count(experts)
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
        writer.add_expert_weights_norm(config["norm_topk_prob"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([f"w{i}" for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    for name, value in gguf_tensors(load_file(str(directory / "model.safetensors")), experts).items():
        writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

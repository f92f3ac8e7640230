"""Write a tiny Qwen3 / Qwen3-MoE / GLM-4.5 / DeepSeek V3 Hugging Face directory as a GGUF file with
the ``gguf`` package (fp32 tensors, llama.cpp names and keys; experts stacked per layer, as llama.cpp
stores them; GLM gets a stand-in next-token-prediction block past its layers, which the loader must
skip; DeepSeek's ``kv_b_proj`` is split into ``attn_k_b`` (transposed) and ``attn_v_b`` as newer
llama.cpp converters write it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
from safetensors.numpy import load_file

from tests.models.tiny_models import VOCAB

_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
          "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate": "ffn_gate_inp",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
          "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
          "mlp.shared_experts.down_proj": "ffn_down_shexp", "self_attn.q_a_proj": "attn_q_a",
          "self_attn.q_a_layernorm": "attn_q_a_norm", "self_attn.q_b_proj": "attn_q_b",
          "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa", "self_attn.kv_a_layernorm": "attn_kv_a_norm"}
_ARCHES = {"qwen3": "qwen3", "qwen3_moe": "qwen3moe", "glm4_moe": "glm4moe", "deepseek_v3": "deepseek2"}
_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}


def layer_tensors(tensors: dict[str, np.ndarray], global_names: dict[str, str],
                  out: dict[str, np.ndarray]) -> Iterator[tuple[str, str, np.ndarray]]:
    """Each layer tensor but the experts' as (layer, its name inside the layer, value). Global
    tensors go into ``out`` under ``global_names``; the experts, once all are read, stacked per layer
    and projection as llama.cpp stores them (``blk.N.ffn_{gate,up,down}_exps.weight``)."""
    stacked: dict[tuple[str, str], dict[int, np.ndarray]] = {}
    for name, value in tensors.items():
        if name in global_names:
            out[global_names[name]] = value
            continue
        layer, rest = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name).groups()
        expert = re.fullmatch(r"mlp\.experts\.(\d+)\.(\w+)_proj\.weight", rest)
        if expert:
            stacked.setdefault((layer, expert.group(2)), {})[int(expert.group(1))] = value
        else:
            yield layer, rest, value
    for (layer, kind), parts in stacked.items():
        out[f"blk.{layer}.ffn_{kind}_exps.weight"] = np.stack([parts[e] for e in range(len(parts))])


def gguf_tensors(tensors: dict[str, np.ndarray], glm: bool, config: dict) -> dict[str, np.ndarray]:
    names = dict(_NAMES, post_attention_layernorm="post_attention_norm") if glm else _NAMES
    out: dict[str, np.ndarray] = {}
    for layer, rest, value in layer_tensors(tensors, _GLOBAL, out):
        if rest == "mlp.gate.e_score_correction_bias":
            out[f"blk.{layer}.exp_probs_b.bias"] = value
        elif rest == "self_attn.kv_b_proj.weight":
            nope = config["qk_nope_head_dim"]
            heads = value.reshape(config["num_attention_heads"], nope + config["v_head_dim"], -1)
            out[f"blk.{layer}.attn_k_b.weight"] = heads[:, :nope].transpose(0, 2, 1)
            out[f"blk.{layer}.attn_v_b.weight"] = heads[:, nope:]
        else:
            base, suffix = rest.rsplit(".", 1)
            out[f"blk.{layer}.{names[base]}.{suffix}"] = value
    return out


def write_tiny_gguf(directory: Path, path: Path) -> Path:
    """The GGUF twin of the tiny Hugging Face model in ``directory``."""
    import gguf

    config = json.loads((directory / "config.json").read_text())
    glm = config["model_type"] == "glm4_moe"
    writer = gguf.GGUFWriter(str(path), _ARCHES[config["model_type"]])
    layers = config["num_hidden_layers"]
    writer.add_block_count(layers + 1 if glm else layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    mla = config["model_type"] == "deepseek_v3"
    if mla:
        latent, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
        writer.add_key_length(latent + rope)
        writer.add_value_length(latent)
        writer.add_key_length_mla(config["qk_nope_head_dim"] + rope)
        writer.add_value_length_mla(config["v_head_dim"])
        writer.add_kv_lora_rank(latent)
        if config.get("q_lora_rank"):
            writer.add_q_lora_rank(config["q_lora_rank"])
        writer.add_rope_dimension_count(rope)
    else:
        writer.add_key_length(config["head_dim"])
        writer.add_value_length(config["head_dim"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    experts = config.get("num_experts") or config.get("num_local_experts") or config.get("n_routed_experts") or 0
    if experts:
        writer.add_expert_count(experts)
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
        writer.add_expert_weights_norm(config["norm_topk_prob"])
    if glm or mla:
        writer.add_expert_shared_count(config["n_shared_experts"])
        writer.add_expert_weights_scale(config["routed_scaling_factor"])
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_expert_group_count(config["n_group"])
        writer.add_expert_group_used_count(config["topk_group"])
        writer.add_leading_dense_block_count(config["first_k_dense_replace"])
    if glm:
        head_dim = config["head_dim"]
        writer.add_rope_dimension_count(int(head_dim * config["rope_parameters"]["partial_rotary_factor"]))
        writer.add_nextn_predict_layers(1)
    tensors = gguf_tensors(load_file(str(directory / "model.safetensors")), glm, config)
    if glm:  # a stand-in MTP block: the next-token-prediction layer past the main ones
        tensors[f"blk.{layers}.nextn.eh_proj.weight"] = np.zeros((config["hidden_size"], 2 * config["hidden_size"]))
        tensors[f"blk.{layers}.attn_norm.weight"] = np.ones(config["hidden_size"])
    finish_gguf(writer, config, tensors)
    return path


def finish_gguf(writer, config: dict, tensors: dict[str, np.ndarray],
                quantized: Optional[Callable[[str, np.ndarray], Any]] = None) -> None:
    """Write the tests' tokenizer keys (the tiny models' ``w<i>`` vocabulary), ``tensors`` in fp32
    (or in the GGML type ``quantized(name, values)`` names, where it names one), and close the file."""
    from gguf.quants import quantize

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([f"w{i}" for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    for name, value in tensors.items():
        value = np.ascontiguousarray(value, dtype=np.float32)
        qtype = quantized(name, value) if quantized else None
        if qtype is None:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, quantize(value, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

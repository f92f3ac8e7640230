"""Convert a Llama-family GGUF file into a Hugging Face directory (dequantized) in a cache.

The directory holds config.json, model.safetensors (in the requested dtype), tokenizer.json and
tokenizer_config.json (special tokens, chat template), so the Hugging Face loader reads it back.
llama.cpp reorders the rows of q and k inside each head for Llama models; that is undone here.
Converted for int4 weights, Q4_0 / Q4_1 linear weights are stored 4-bit (:mod:`kvgate.models.gguf_quant`),
Q8_0 / Q4_K / Q5_K / Q6_K / Q5_0 / Q5_1 ones, the output head and (but in a Q4_0 / Q4_1 file) the
token embedding as the file's own blocks (:mod:`kvgate.models.gguf_kquant_store`).
The names and keys of Qwen3, Qwen3-MoE and GLM-4.5 are in :mod:`kvgate.models.gguf_experts`, those of
the hybrids (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) in :mod:`kvgate.models.gguf_hybrid`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from kvgate.models import gguf_experts, gguf_hybrid, gguf_hybrid_q4
from kvgate.models.cpu_kernels.llama_layer import llama_layer_kernel
from kvgate.models.gguf_kquant import TYPES as KQUANT_TYPES
from kvgate.models.gguf_kquant_store import stored_kquant
from kvgate.models.gguf_quant import q4_parts, stored_parts
from kvgate.models.gguf_tokenizer import build_tokenizer, special_token_texts
from kvgate.models.progress import Progress
from kvgate.models.weight_format import Q4_FILE_TYPES

_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", **gguf_experts.LAYER_NAMES,
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                 "output.weight": "lm_head.weight"}
_HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", **gguf_experts.HF_CLASSES,
               **gguf_hybrid.HF_CLASSES}
NATIVE_MODEL_TYPES = ("llama", "qwen2")  # GGUF layers the native Llama layer runs (no q/k norm, no experts)
_HF_MODEL_TYPES = {**gguf_experts.HF_MODEL_TYPES, **gguf_hybrid.HF_MODEL_TYPES}


def open_gguf(path: str):
    import gguf

    try:
        return gguf.GGUFReader(path)
    except Exception as exc:  # the reader raises assorted errors on a damaged file
        raise ValueError(f"{path} is not a readable GGUF file: {exc}") from None


def read_metadata(reader) -> dict[str, Any]:
    return {name: field.contents() for name, field in reader.fields.items()}


def hf_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if not match or match.group(2) not in _LAYER_NAMES:
        raise ValueError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{match.group(3)}"


def unpermute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head interleaving of q/k rows (back to split-half RoPE order)."""
    rows = weight.shape[0]
    rest = weight.shape[1:]
    return weight.reshape(heads, rows // heads // 2, 2, *rest).swapaxes(1, 2).reshape(weight.shape)


def hf_config(meta: dict[str, Any], has_output: bool) -> dict[str, Any]:
    arch = meta.get("general.architecture")
    if arch not in _HF_CLASSES:
        raise ValueError(f"unsupported GGUF architecture {arch!r} (supported: {', '.join(_HF_CLASSES)})")

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF metadata is missing {arch}.{name}")
        return value

    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    config = {
        "model_type": _HF_MODEL_TYPES.get(arch, arch), "architectures": [_HF_CLASSES[arch]],
        "vocab_size": int(meta.get(f"{arch}.vocab_size") or len(meta["tokenizer.ggml.tokens"])),
        "hidden_size": hidden, "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(meta.get(f"{arch}.attention.key_length") or hidden // heads),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(key("context_length")),
        "tie_word_embeddings": not has_output,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
    }
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": float(key("rope.scaling.factor"))}
    elif scaling == "yarn":  # llama.cpp's keys for a YaRN checkpoint (e.g. a Qwen3 GGUF at 128K)
        config["rope_scaling"] = {"rope_type": "yarn", "factor": float(key("rope.scaling.factor")),
                                  "original_max_position_embeddings": int(key("rope.scaling.original_context_length"))}
    elif scaling not in (None, "none"):
        raise ValueError(f"unsupported GGUF rope scaling {scaling!r}")
    return config


def _unpermuted(gguf_name: str, values: np.ndarray, config: dict[str, Any]) -> np.ndarray:
    """``values`` (rows first) with llama.cpp's q/k row order undone, for a Llama model's q and k."""
    if config["model_type"] != "llama" or not re.search(r"attn_[qk]\.", gguf_name):
        return values
    heads = config["num_attention_heads" if ".attn_q." in gguf_name else "num_key_value_heads"]
    return unpermute_rows(values, heads)


def _kept_4bit(tensor, config: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The stored 4-bit parts (:mod:`kvgate.models.gguf_quant`) of a dense layer's Q4_0 / Q4_1
    linear weight; empty for any other tensor (it is dequantized)."""
    match = re.fullmatch(r"blk\.(\d+)\.(attn_[qkv]|attn_output|ffn_gate|ffn_up|ffn_down)\.weight", tensor.name)
    parts = q4_parts(tensor.data, tensor.tensor_type.name) if match else None
    if parts is None or int(match.group(1)) >= config["num_hidden_layers"]:
        return {}
    return stored_parts(hf_name(tensor.name), tuple(_unpermuted(tensor.name, part, config) for part in parts))


def q4_blocks_wanted(native_layers: bool) -> bool:
    """Whether a plain Llama's Q4_0 / Q4_1 projections are to be kept as the file's blocks rather than
    int4 parts: for the native layer (``[model] native_layers``, :mod:`kvgate.models.llama.native`),
    where it builds."""
    return native_layers and llama_layer_kernel() is not None


def _kept_kquant(tensor, config: dict[str, Any], embedding: bool) -> dict[str, torch.Tensor]:
    """The raw rows (:mod:`kvgate.models.gguf_kquant_store`) of a dense layer's linear weight, of the
    output head or, with ``embedding``, of the token embedding in a type of :mod:`kvgate.models.gguf_kquant`
    (Q4_0 / Q4_1 projections too, where the caller keeps them so); empty for any other tensor (it is dequantized)."""
    match = re.fullmatch(r"blk\.(\d+)\.(attn_[qkv]|attn_output|ffn_gate|ffn_up|ffn_down)\.weight|output\.weight"
                         r"|(token_embd)\.weight", tensor.name)
    if not match or tensor.tensor_type.name not in KQUANT_TYPES or len(tensor.data.shape) != 2:
        return {}
    if match.group(3) is not None and not embedding:
        return {}
    if match.group(1) is not None and int(match.group(1)) >= config["num_hidden_layers"]:
        return {}
    return stored_kquant(hf_name(tensor.name), _unpermuted(tensor.name, tensor.data, config), tensor.tensor_type.name)


def _hf_tensors(gguf_name: str, values: np.ndarray, config: dict[str, Any], hybrid: bool) -> dict[str, np.ndarray]:
    if hybrid:
        return gguf_hybrid.hf_tensors(gguf_name, values, config, hf_name)
    return gguf_experts.hf_tensors(gguf_name, values, config["num_hidden_layers"], hf_name)


def convert_gguf(path: str, target: Path, dtype: torch.dtype, progress: Progress, int4: bool = False,
                 q4_blocks: bool = False) -> None:
    """Write the Hugging Face directory for the GGUF at ``path`` into ``target`` (must exist);
    ``int4``: Q4_0 / Q4_1 linear weights stay 4-bit (:mod:`kvgate.models.gguf_quant`; the hybrids'
    projections through :mod:`kvgate.models.gguf_hybrid_q4`; with ``q4_blocks``, a plain Llama's as the
    file's blocks, :data:`NATIVE_MODEL_TYPES`), and a dense model's Q8_0 / Q4_K / Q5_K /
    Q6_K / Q5_0 / Q5_1 linear weights, output head (Q4_0 / Q4_1 too) and (but in a Q4_0 / Q4_1 file)
    token embedding keep their blocks (:mod:`kvgate.models.gguf_kquant_store`)."""
    from gguf.quants import dequantize

    progress.stage("reading GGUF metadata")
    reader = open_gguf(path)
    meta = read_metadata(reader)
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise ValueError("GGUF files with a rope_freqs tensor (llama3 rope scaling) are not supported yet")
    config = hf_config(meta, has_output="output.weight" in names)
    config.update(gguf_experts.family_config(meta, names, config))
    hybrid = meta.get("general.architecture") in gguf_hybrid.HF_CLASSES
    if hybrid:
        config.update(gguf_hybrid.family_config(meta, config))
    progress.stage("building tokenizer")
    build_tokenizer(meta).save(str(target / "tokenizer.json"))
    specials = special_token_texts(meta)
    tokenizer_config = dict(specials, chat_template=meta.get("tokenizer.chat_template"),
                            add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)))
    progress.stage(f"dequantizing {len(reader.tensors)} tensors")
    # a Q4_0 / Q4_1 file keeps its dense embedding and int8 tied head (the embedded model's defaults)
    embedding = meta.get("general.file_type") not in Q4_FILE_TYPES
    q4_blocks = q4_blocks and not hybrid and config["model_type"] in NATIVE_MODEL_TYPES
    tensors = {}
    for index, tensor in enumerate(reader.tensors):
        progress.count("tensors dequantized", index, len(reader.tensors))
        kept = int4 and (gguf_hybrid_q4.kept_4bit(tensor, config, hf_name) if hybrid
                         else _kept_kquant(tensor, config, embedding) if q4_blocks
                         else _kept_4bit(tensor, config) or _kept_kquant(tensor, config, embedding))
        if kept:
            tensors.update(kept)
            continue
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        values = _unpermuted(tensor.name, values.reshape([int(d) for d in reversed(tensor.shape)]), config)
        for name, part in _hf_tensors(tensor.name, values, config, hybrid).items():
            part = np.ascontiguousarray(part)
            if not part.flags.writeable:  # plain F32 tensors are views of the read-only memory map
                part = part.copy()
            tensors[name] = torch.from_numpy(part).to(dtype)
    progress.stage("writing converted weights")
    save_file(tensors, str(target / "model.safetensors"))
    (target / "config.json").write_text(json.dumps(config, indent=1))
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))

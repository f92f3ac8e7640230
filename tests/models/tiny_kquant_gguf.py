"""A tiny random Llama written as a GGUF of K-quant tensors (:mod:`tests.models.kquant_writer`): hidden
256 and intermediate 512 so every row is whole 256-weight blocks; q/k rows permuted as llama.cpp
stores them; Q4_K projections with a Q4_K_M-like mix (v and down Q6_K / Q5_K / Q8_0 per layer, so a
fused qkv mixes types), a Q6_K output head and a Q8_0 token embedding."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.models.kquant_writer import quantize_rows
from tests.models.tiny_gguf import finish_gguf
from tests.models.tiny_models import VOCAB

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2
CONFIG = {"bos_token_id": 1, "eos_token_id": 2}
# Q4_K_M keeps some v / down projections in 6 bits; here one layer each way, and a Q8_0 v
MIXES = {"Q4_K_M": [{"attn_v": "Q6_K", "ffn_down": "Q6_K"}, {"attn_v": "Q8_0", "ffn_down": "Q5_K"}],
         "Q4_K": [{}, {}], "Q5_K": [{"*": "Q5_K"}] * 2, "Q6_K": [{"*": "Q6_K"}] * 2, "Q8_0": [{"*": "Q8_0"}] * 2}
PROJECTIONS = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * 64, HIDDEN), "attn_v": (KV_HEADS * 64, HIDDEN),
               "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (INTERMEDIATE, HIDDEN), "ffn_up": (INTERMEDIATE, HIDDEN),
               "ffn_down": (HIDDEN, INTERMEDIATE)}


def permute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's per-head interleaving of q/k rows (its converter's ``permute``)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def add_tensor(writer, name: str, weight: np.ndarray, type_name: str) -> None:
    import gguf

    if type_name == "F32":
        writer.add_tensor(name, weight.astype(np.float32))
    else:
        writer.add_tensor(name, quantize_rows(weight, type_name), raw_dtype=gguf.GGMLQuantizationType[type_name])


def add_layers(writer, rng, layer_types: list[dict[str, str]], projections: dict[str, tuple[int, int]],
               heads: tuple[int, int], f32: tuple[str, ...] = ()) -> None:
    """Each layer's norms (F32) and random projections in ``layer_types[layer][name]`` (q/k rows permuted
    for ``heads`` = (query heads, key-value heads)); the tensors named in ``f32`` are written dense."""
    hidden = projections["attn_q"][1]
    for layer, types in enumerate(layer_types):
        for norm in ("attn_norm", "ffn_norm"):
            add_tensor(writer, f"blk.{layer}.{norm}.weight", 1 + 0.1 * rng.standard_normal(hidden), "F32")
        for name, shape in projections.items():
            weight = rng.standard_normal(shape) / np.sqrt(shape[1])
            if name in ("attn_q", "attn_k"):
                weight = permute_rows(weight, heads[0] if name == "attn_q" else heads[1])
            full = f"blk.{layer}.{name}.weight"
            add_tensor(writer, full, weight, "F32" if full in f32 else types[name])


def start_writer(path: Path, arch: str, rng, eps: float, rope_base: float, file_type: int):
    """A GGUF writer for a tiny ``arch`` model at ``path``: its hyperparameters, and its Q8_0 embedding,
    Q6_K output head and output norm (the layers are the caller's)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_freq_base(rope_base)
    writer.add_file_type(file_type)
    add_tensor(writer, "token_embd.weight", rng.standard_normal((VOCAB, HIDDEN)), "Q8_0")
    add_tensor(writer, "output.weight", rng.standard_normal((VOCAB, HIDDEN)) * 0.2, "Q6_K")
    add_tensor(writer, "output_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), "F32")
    return writer


def write_kquant_llama(path: Path, mix: str = "Q4_K_M", seed: int = 0) -> Path:
    """A tiny Llama GGUF at ``path`` whose projections are quantized as ``mix`` (a key of :data:`MIXES`)."""
    rng = np.random.default_rng(seed)
    writer = start_writer(path, "llama", rng, 1e-5, 10000.0, 15 if mix == "Q4_K_M" else 2)
    mixes = [{name: types.get(name, types.get("*", "Q4_K")) for name in PROJECTIONS} for types in MIXES[mix]]
    add_layers(writer, rng, mixes, PROJECTIONS, (HEADS, KV_HEADS))
    finish_gguf(writer, CONFIG, {})
    return path

"""A tiny random Llama 576 wide, written as llama-quantize writes a 576-wide model's Q4_K_M: rows of
576 weights are no whole 256-weight blocks, so its projections are Q5_0 (Q4_K's fallback) and the tied
embedding Q8_0 (Q6_K's); the 1536-wide down projections keep Q4_K / Q6_K. One gate is Q5_1 (Q5_K's
fallback, as in a Q5_K_M) so a fused gate/up mixes the two."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.models.tiny_gguf import finish_gguf
from tests.models.tiny_kquant_gguf import add_layers, add_tensor
from tests.models.tiny_models import VOCAB

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, LAYERS = 576, 1536, 9, 3, 2
CONFIG = {"bos_token_id": 1, "eos_token_id": 2}
PROJECTIONS = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV_HEADS * 64, HIDDEN), "attn_v": (KV_HEADS * 64, HIDDEN),
               "attn_output": (HIDDEN, HIDDEN), "ffn_gate": (INTERMEDIATE, HIDDEN), "ffn_up": (INTERMEDIATE, HIDDEN),
               "ffn_down": (HIDDEN, INTERMEDIATE)}
# per layer, the projections not Q5_0
MIX = [{"attn_v": "Q8_0", "ffn_down": "Q6_K"}, {"ffn_gate": "Q5_1", "ffn_down": "Q4_K"}]
EMBEDDING_TYPE = "Q8_0"


def write_576_llama(path: Path, seed: int = 0, f32: tuple[str, ...] = ()) -> Path:
    """The tiny 576-wide Q4_K_M-like Llama GGUF at ``path`` (tied embedding, file type MOSTLY_Q4_K_M);
    the tensors named in ``f32`` are written dense."""
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in [(writer.add_block_count, LAYERS), (writer.add_context_length, 512),
                       (writer.add_embedding_length, HIDDEN), (writer.add_feed_forward_length, INTERMEDIATE),
                       (writer.add_head_count, HEADS), (writer.add_head_count_kv, KV_HEADS),
                       (writer.add_layer_norm_rms_eps, 1e-5), (writer.add_rope_freq_base, 10000.0),
                       (writer.add_file_type, 15)]:
        add(value)
    add_tensor(writer, "token_embd.weight", rng.standard_normal((VOCAB, HIDDEN)) * 0.5, EMBEDDING_TYPE)
    add_tensor(writer, "output_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN), "F32")
    mixes = [{name: types.get(name, "Q5_0") for name in PROJECTIONS} for types in MIX]
    add_layers(writer, rng, mixes, PROJECTIONS, (HEADS, KV_HEADS), f32)
    finish_gguf(writer, CONFIG, {})
    return path

"""A tiny Llama GGUF of K-quant tensors (Q4_K_M's mix and single-type files) loads with its projections
and head kept as the file's blocks, reads them as gguf-py does, stays within a stated tolerance of
the bf16-dequantized model and is bit-identical across prefill splits, forks and batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvgate.core.config import EngineConfig, ModelConfig
from kvgate.models.cpu_kernels.kquant import TYPES
from kvgate.models.fingerprint import weights_fingerprint
from kvgate.models.formats import resolve_source
from kvgate.models.gguf_kquant_embedding import PackedEmbedding
from kvgate.models.gguf_kquant_weight import KQuantWeight, StackedRows
from kvgate.models.gguf_loader import unpermute_rows
from kvgate.models.loading import load_runtime
from tests.models.bit_identity import assert_splits_forks_and_batches_bit_identical
from tests.models.tiny_kquant_gguf import HEADS, KV_HEADS, write_kquant_llama
from tests.models.tiny_models import VOCAB

LOGIT_TOLERANCE = 0.02  # of the largest |logit|: bf16 rounding of the reference's weights and activations
PROMPT = [int(t) for t in np.random.default_rng(7).integers(3, VOCAB, 150)]


def prefill_logits_close_to_bf16(packed, dense, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Both runtimes' prefill logits of ``prompt``, asserted within :data:`LOGIT_TOLERANCE`."""
    ours = packed.prefill(packed.new_session(), prompt, all_logits=True)
    reference = dense.prefill(dense.new_session(), prompt, all_logits=True)
    assert (ours - reference).abs().max() <= LOGIT_TOLERANCE * reference.abs().max()
    return ours, reference


def load(path, weights: str, cache_dir, deterministic: bool = True):
    return load_runtime(resolve_source(str(path)), ModelConfig(dtype="bf16", weights=weights),
                        EngineConfig(kv_pool_tokens=4096, deterministic=deterministic), str(cache_dir))


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kquant")
    path = write_kquant_llama(directory / "tiny-Q4_K_M.gguf")
    return path, load(path, "int4", directory), load(path, "bf16", directory)


def test_projections_and_head_stay_the_files_blocks(q4_k_m):
    _, packed, _ = q4_k_m
    first, second = packed.weights.layers
    assert packed.weights.format == "int4+kquant"
    assert isinstance(first.qkv, StackedRows) and [p.type_name for p in first.qkv.parts] == ["Q4_K", "Q6_K"]
    assert [p.type_name for p in second.qkv.parts] == ["Q4_K", "Q8_0"]
    assert (first.down.type_name, second.down.type_name, first.gate_up.type_name) == ("Q6_K", "Q5_K", "Q4_K")
    assert isinstance(packed.weights.lm_head, KQuantWeight) and packed.weights.lm_head.type_name == "Q6_K"
    embed = packed.weights.embed  # a Q4_K_M file's embedding stays its blocks (a Q4_0 / Q4_1 file's is dense)
    assert isinstance(embed, PackedEmbedding) and embed.weight.type_name == "Q8_0" and embed.dtype == torch.bfloat16


def test_q_and_k_rows_are_unpermuted_whole_and_read_as_gguf_py(q4_k_m):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path, packed, _ = q4_k_m
    reader = {t.name: t for t in GGUFReader(str(path)).tensors}
    parts = [unpermute_rows(dequantize(reader["blk.0.attn_q.weight"].data, reader["blk.0.attn_q.weight"].tensor_type), HEADS),
             unpermute_rows(dequantize(reader["blk.0.attn_k.weight"].data, reader["blk.0.attn_k.weight"].tensor_type), KV_HEADS),
             dequantize(reader["blk.0.attn_v.weight"].data, reader["blk.0.attn_v.weight"].tensor_type)]
    expected = np.concatenate(parts).astype(np.float32)
    got = packed.weights.layers[0].qkv.dequantize(torch.float32).numpy()
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_packed_weights_hold_exactly_the_files_bytes(q4_k_m):
    """The file's blocks as they are; where the native layer took them over, its repacked copy: the
    same bytes in another order but Q4_K's and Q5_K's 6-bit scales and mins widened to bytes (1/36
    more of a Q4_K block)."""
    from gguf import GGUFReader

    path, packed, _ = q4_k_m
    kept = [t for t in GGUFReader(str(path)).tensors if t.name != "token_embd.weight" and t.tensor_type.name != "F32"]
    weights = packed.weights
    fields = [weights.lm_head] + [getattr(layer, f) for layer in weights.layers for f in ("qkv", "o", "gate_up", "down")]
    held = sum(tensor.numel() for field in fields for tensor in field.tensors())  # uint8: bytes
    file_bytes = sum(int(t.n_bytes) for t in kept)
    native = packed.forward.native
    if native is None:
        assert held == file_bytes
        return
    parts = [part for field in fields for part in (field.parts if isinstance(field, StackedRows) else [field])]
    assert held == sum(native.kernel.q8i_bytes(TYPES[p.type_name][0], p.shape[0], p.shape[1]) for p in parts)
    assert file_bytes < held <= file_bytes * (1 + 1 / 36)


def test_logits_and_greedy_tokens_match_the_bf16_model(q4_k_m):
    _, packed, dense = q4_k_m
    ours, reference = prefill_logits_close_to_bf16(packed, dense, PROMPT)
    assert (ours.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.97


def test_deterministic_mode_is_bit_identical_across_splits_forks_and_batches(q4_k_m):
    _, packed, _ = q4_k_m
    assert packed.deterministic
    assert_splits_forks_and_batches_bit_identical(packed, PROMPT)


def test_the_fingerprint_names_the_kquant_format(q4_k_m):
    _, packed, dense = q4_k_m
    assert packed.fingerprint != dense.fingerprint
    weights = packed.weights
    marked = weights_fingerprint(packed.arch, weights, torch.bfloat16)
    weights.format = "int4"
    try:
        assert weights_fingerprint(packed.arch, weights, torch.bfloat16) != marked
    finally:
        weights.format = "int4+kquant"


@pytest.mark.parametrize("mix", ["Q4_K", "Q5_K", "Q6_K", "Q8_0"])
def test_single_type_files_load_packed_and_close_to_bf16(mix, tmp_path):
    path = write_kquant_llama(tmp_path / f"tiny-{mix}.gguf", mix, seed=3)
    packed, dense = load(path, "int4", tmp_path, False), load(path, "bf16", tmp_path, False)
    assert packed.weights.layers[1].gate_up.type_name == mix and packed.weights.layers[0].qkv.type_name == mix
    prefill_logits_close_to_bf16(packed, dense, PROMPT[:40])

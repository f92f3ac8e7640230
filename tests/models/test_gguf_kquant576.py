"""A 576-wide Q4_K_M-like Llama GGUF (Q5_0 / Q5_1 projections, Q4_K / Q6_K downs, a tied Q8_0
embedding: :mod:`tests.models.tiny_kquant576_gguf`) loads packed on the defaults, embedding and head
included; it reads as gguf-py does, stays close to the bf16-dequantized model, holds no more bytes
than the file and is bit-identical across splits, forks and batches in deterministic mode."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from kvgate.core.config import ModelConfig
from kvgate.models.formats import resolve_source
from kvgate.models.gguf_kquant import dequantize_rows
from kvgate.models.gguf_kquant_embedding import PackedEmbedding
from kvgate.models.weight_format import resolve_weights
from tests.models.bit_identity import assert_splits_forks_and_batches_bit_identical
from tests.models.test_gguf_kquant_loading import load, prefill_logits_close_to_bf16
from tests.models.tiny_kquant576_gguf import write_576_llama
from tests.models.tiny_models import VOCAB

PROMPT = [int(t) for t in np.random.default_rng(11).integers(3, VOCAB, 150)]  # bit_identity takes 150 tokens


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kquant576")
    path = write_576_llama(directory / "tiny-576-Q4_K_M.gguf")
    return path, load(path, "auto", directory), load(path, "bf16", directory)


def types(weight) -> list[str]:
    return [part.type_name for part in getattr(weight, "parts", [weight])]


def test_the_defaults_keep_every_matrix_packed_embedding_and_tied_head_included(model):
    _, packed, dense = model
    assert packed.weights.format == "int4+kquant" and dense.weights.format == "bf16"
    first, second = packed.weights.layers
    assert [types(first.qkv), types(first.o), types(first.gate_up), types(first.down)] == [
        ["Q5_0", "Q8_0"], ["Q5_0"], ["Q5_0"], ["Q6_K"]]
    assert [types(second.qkv), types(second.gate_up), types(second.down)] == [["Q5_0"], ["Q5_1", "Q5_0"], ["Q4_K"]]
    embed = packed.weights.embed
    assert isinstance(embed, PackedEmbedding) and embed.weight.type_name == "Q8_0"
    assert packed.weights.lm_head is embed.weight  # the tied head: the same blocks, not an int8 copy
    assert embed.dtype == torch.bfloat16 and tuple(embed.shape) == (VOCAB, 576)
    assert packed.fingerprint != dense.fingerprint  # digests the blocks, names "int4+kquant" and the kernel


def test_the_embedding_lookup_is_the_whole_table_dequantized_then_gathered(model):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path, packed, _ = model
    table = next(t for t in GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    whole = torch.from_numpy(dequantize(table.data, table.tensor_type).reshape(VOCAB, 576).astype(np.float32))
    tokens = torch.tensor([[5, 0, 96], [5, 40, 7]])
    assert torch.equal(packed.weights.embed[tokens], whole.bfloat16()[tokens])
    weight = packed.weights.embed.weight  # the tied head's blocks: the native layer's repacked copy where it runs
    assert torch.equal(weight.rows(tokens[0]), whole[tokens[0]])
    if weight.raw is not None:
        assert torch.equal(dequantize_rows(weight.raw, "Q8_0")[tokens[0]], whole[tokens[0]])


def test_the_weights_hold_the_files_bytes_and_no_more(model):
    """The blocks as the file holds them, or where the native layer took them over its repacked copy:
    the same bytes in another order but Q4_K's and Q5_K's 6-bit scales and mins widened to bytes (at
    most 1/36 more)."""
    from gguf import GGUFReader

    path, packed, _ = model
    quantized = sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors if t.tensor_type.name != "F32")
    held = {tensor.data_ptr(): tensor.numel() * tensor.element_size() for tensor in packed.weights.named_tensors()}
    blocks = sum(size for size in held.values())
    widened = 1 + 1 / 36 if packed.forward.native is not None else 1
    assert quantized <= blocks <= widened * quantized + 4 * 576 * 8  # the norms (bf16) beside the blocks
    assert blocks <= widened * os.path.getsize(path)


def test_logits_and_greedy_tokens_match_the_bf16_model(model):
    _, packed, dense = model
    ours, reference = prefill_logits_close_to_bf16(packed, dense, PROMPT)
    assert (ours.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.97


def test_deterministic_mode_is_bit_identical_across_splits_forks_and_batches(model):
    _, packed, _ = model
    assert_splits_forks_and_batches_bit_identical(packed, PROMPT)


def test_auto_stays_bf16_for_a_file_with_a_dense_layer_matrix_or_off_cpu_bf16(model, tmp_path):
    path = write_576_llama(tmp_path / "dense-down.gguf", f32=("blk.1.ffn_down.weight",))
    cpu = torch.device("cpu")
    assert resolve_weights(ModelConfig(dtype="bf16"), resolve_source(str(path)), cpu) == "bf16"
    packed = resolve_source(str(model[0]))
    assert resolve_weights(ModelConfig(dtype="bf16"), packed, cpu) == "int4"
    assert resolve_weights(ModelConfig(dtype="fp32"), packed, cpu) == "bf16"

"""``[model] weights`` int8 / int4 on the tiny Qwen3.5, Qwen3.5-MoE and Qwen3-Next (bf16 on CPU).

Tolerances against the bf16 load of the same checkpoint (150 tokens, all logits, whose spread is
~0.17): max |logit| error under 0.06 and greedy top-1 agreement at least 90 % (measured: int8
0.008-0.026 / 97-99 %; int4, which packs only the shapes it can hold, 0.023-0.042 / 94-97 %). The deterministic mode stays bit-identical across prefill
splits, forks and batched decode with packed weights, and each format has its own fingerprint.
"""

from __future__ import annotations

import pytest
import torch

from kvgate.models.quant_linear import Int4Weight, Int8Weight
from tests.models.bit_identity import assert_splits_forks_and_batches_bit_identical
from tests.models.tiny_models import VOCAB
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(7)).tolist()
MODEL_TYPES = ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


@pytest.fixture(scope="module", params=MODEL_TYPES)
def tiny(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    build_tiny_qwen3_5(directory, seed=5, model_type=request.param)
    bf16 = load_tiny_qwen3_5(directory, dtype="bf16", state_stride=64)
    return directory, bf16, bf16.prefill(bf16.new_session(), PROMPT, all_logits=True)


def load(directory, fmt: str):
    return load_tiny_qwen3_5(directory, dtype="bf16", state_stride=64, weights=fmt)


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_packed_weights_stay_close_to_bf16(tiny, fmt):
    directory, bf16, expected = tiny
    runtime = load(directory, fmt)
    packed = runtime.forward.weights
    kind = Int8Weight if fmt == "int8" else Int4Weight
    layer = next(layer for layer in packed.layers if layer.full is not None)
    assert packed.format == fmt and isinstance(layer.full.q, kind) and isinstance(packed.lm_head, Int8Weight)
    if fmt == "int8":
        linear = next(layer.linear for layer in packed.layers if layer.linear is not None)
        assert all(isinstance(w, Int8Weight) for w in (linear.qkv, linear.z, linear.b, linear.a, linear.out))
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    agreement = (logits.argmax(-1) == expected.argmax(-1)).float().mean().item()
    assert 0 < (logits - expected).abs().max() < 0.06 and agreement >= 0.9, (fmt, agreement)
    assert runtime.fingerprint != bf16.fingerprint


def test_int8_is_bit_identical_across_splits_forks_and_batches(tiny):
    runtime = load(tiny[0], "int8")
    assert_splits_forks_and_batches_bit_identical(runtime, PROMPT)

"""``[model] weights``: the embedded SmolLM2-135M (Q4_1 GGUF) in bf16, int8 and int4 on real text.

int4 holds the projections as :class:`Int4Weight` parts; with ``[model] native_layers`` (where the
native Llama layer builds, :mod:`kvgate.models.llama.native`) they stay the file's Q4_1 blocks
(format ``int4+kquant``) and each layer runs as one native call. Both are tested.

Accuracy tolerances, against the bf16 path on 1,536 tokens of English prose (Python's own
reference text, ``pydoc_data``), prefilled in chunks of 128 (the quantized kernels' path):
greedy top-1 agreement at least 93 % (measured int4 parts 97.5 %, native 97.0 %, int8 95.8 %);
perplexity within 1 % of bf16's for int4 (measured parts +0.02 %, native -0.04 %: the Q4_1 weights
map onto int4 exactly) and 2 % for int8 (measured +0.06 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kvgate.core.config import EngineConfig, ModelConfig
from kvgate.models.cpu_kernels.llama_layer import llama_layer_kernel
from kvgate.models.formats import resolve_source
from kvgate.models.gguf_kquant_weight import KQuantWeight
from kvgate.models.gguf_quant import gather_parts, q4_parts, stored_parts
from kvgate.models.loading import load_runtime
from kvgate.models.quant_linear import DENSE_ROWS, Int4Weight, Int8Weight, linear

pytestmark = pytest.mark.slow
FORMATS = ("bf16", "int8", "int4")
TOKENS, CHUNK = 1536, 128
NATIVE = llama_layer_kernel() is not None


def load(weights: str, cache_dir: str, dtype: str = "bf16", native_layers: bool = False):
    return load_runtime(resolve_source(""), ModelConfig(dtype=dtype, weights=weights, max_context=8192,
                                                        native_layers=native_layers),
                        EngineConfig(kv_pool_tokens=4096), cache_dir)


@pytest.fixture(scope="module")
def runtimes(smollm2_model_cache):
    loaded = {fmt: load(fmt, smollm2_model_cache) for fmt in FORMATS}
    return {**loaded, "int4 native": load("int4", smollm2_model_cache, native_layers=True)}


def prose_tokens(runtime) -> list[int]:
    import pydoc_data.topics

    text = pydoc_data.topics.topics["naming"] + pydoc_data.topics.topics["exceptions"]
    tokens = runtime.tokenizer.encode(text).ids[:TOKENS]
    assert len(tokens) == TOKENS
    return tokens


def chunked_logits(runtime, tokens: list[int]) -> torch.Tensor:
    session = runtime.new_session()
    try:
        return torch.cat([runtime.prefill(session, tokens[i:i + CHUNK], all_logits=True).float()
                          for i in range(0, len(tokens), CHUNK)])
    finally:
        runtime.release(session)


def perplexity(logits: torch.Tensor, tokens: list[int]) -> float:
    targets = torch.tensor(tokens[1:])[:, None]
    return math.exp(-torch.log_softmax(logits[:-1], -1).gather(1, targets).mean().item())


MIN_AGREEMENT = 0.93
PPL_TOLERANCE = {"int4": 0.01, "int4 native": 0.01, "int8": 0.02}


def agreement_and_perplexity_ratio(runtime, reference) -> tuple[float, float]:
    """Greedy top-1 agreement with ``reference`` on the prose, and the ratio of their perplexities."""
    tokens = prose_tokens(reference)
    dense, quantized = chunked_logits(reference, tokens), chunked_logits(runtime, tokens)
    agreement = (dense.argmax(-1) == quantized.argmax(-1)).float().mean().item()
    return agreement, perplexity(quantized, tokens) / perplexity(dense, tokens)


@pytest.mark.parametrize("fmt", list(PPL_TOLERANCE))
def test_greedy_agreement_and_perplexity_stay_close_to_bf16(runtimes, fmt):
    agreement, ratio = agreement_and_perplexity_ratio(runtimes[fmt], runtimes["bf16"])
    assert agreement >= MIN_AGREEMENT, agreement
    assert abs(ratio - 1) <= PPL_TOLERANCE[fmt], ratio


def test_the_linear_weights_hold_the_format(runtimes):
    int4, native, int8 = (runtimes[fmt].weights.layers[0] for fmt in ("int4", "int4 native", "int8"))
    assert isinstance(int4.gate_up, Int4Weight) and isinstance(int8.gate_up, Int8Weight)
    assert runtimes["int4"].weights.format == "int4" and runtimes["int4"].forward.native is None
    if NATIVE:  # the native layer reads the file's own blocks
        assert runtimes["int4 native"].weights.format == "int4+kquant" and runtimes["int4 native"].forward.native
        assert all(isinstance(w, KQuantWeight) and w.type_name == "Q4_1" for w in (native.qkv, native.gate_up,
                                                                                   native.down))
    for fmt in ("int4", "int4 native"):
        assert isinstance(runtimes[fmt].weights.lm_head, Int8Weight)  # the Q8_0 head: int8 per row
    dense = runtimes["bf16"].weights.layers[0].qkv.float()
    for weight in (int4.qkv, native.qkv, int8.qkv):  # q/k rows reordered as the dense weights are
        assert ((weight.dequantize().float() - dense).norm() / dense.norm()).item() < 0.01


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_q4_blocks_map_onto_int4_parts_exactly(kind):
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize, quantize

    from kvgate.models.embedded import embedded_gguf_path

    qtype = GGMLQuantizationType[kind]
    if kind == "Q4_1":  # the embedded model's own blocks
        tensor = next(t for t in GGUFReader(embedded_gguf_path()).tensors if t.name == "blk.0.ffn_down.weight")
        blocks = tensor.data
    else:
        blocks = quantize(np.random.default_rng(0).standard_normal((128, 96)).astype(np.float32), qtype)
    expected = dequantize(blocks, qtype).reshape(blocks.shape[0], -1)
    q, scale, zero = q4_parts(blocks, kind)
    groups = (q.reshape(q.shape[0], -1, 32).astype(np.float32) - 8) * scale[..., None] + zero[..., None]
    assert np.array_equal(groups.reshape(expected.shape), expected)  # (q - 8) * scale + zero, in fp32
    packed = gather_parts(stored_parts("w", (q, scale, zero)))["w"].weight()
    reference = torch.from_numpy(expected)
    assert ((packed.dequantize().float() - reference).norm() / reference.norm()).item() < 0.005  # bf16 scales


def test_large_calls_take_the_dense_path_and_agree_with_the_kernel(runtimes):
    weight = runtimes["int4"].weights.layers[3].gate_up
    x = torch.randn(DENSE_ROWS + 40, weight.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()
    dense_path = linear(x, weight).float()
    kernel_rows = torch.cat([linear(part, weight) for part in x.split(DENSE_ROWS - 1)]).float()
    assert not torch.equal(dense_path, kernel_rows)  # two code paths indeed
    assert ((dense_path - kernel_rows).norm() / kernel_rows.norm()).item() < 5e-3  # bf16 output rounding


def test_the_fingerprint_names_the_format_and_is_stable(runtimes, smollm2_model_cache):
    prints = {fmt: runtime.fingerprint for fmt, runtime in runtimes.items()}
    assert len({prints[fmt] for fmt in FORMATS}) == len(FORMATS)  # KV of one format never serves another
    assert (prints["int4"] != prints["int4 native"]) == NATIVE  # nor the native layer's the parts path's
    assert load("int4", smollm2_model_cache).fingerprint == prints["int4"]  # a restart hits its own cache


def test_auto_picks_int4_for_a_q4_gguf_on_cpu_in_bf16_only(smollm2_model_cache):
    assert load("auto", smollm2_model_cache).weights.format == "int4"
    assert load("auto", smollm2_model_cache, dtype="fp32").weights.format == "bf16"
    for deterministic in (True, False):  # the int4 kernel is row-invariant: deterministic runs keep it
        runtime = load_runtime(resolve_source(""), ModelConfig(dtype="bf16", max_context=8192, native_layers=False),
                               EngineConfig(kv_pool_tokens=4096, deterministic=deterministic), smollm2_model_cache)
        assert runtime.weights.format == "int4" and runtime.deterministic == deterministic
    with pytest.raises(ValueError, match='weights = "int4" is not available with dtype "fp32"'):
        load("int4", smollm2_model_cache, dtype="fp32")


def test_safetensors_weights_are_quantized_at_load(tmp_path):
    from tests.models.tiny_models import build_tiny, load_tiny

    build_tiny(tmp_path, "qwen2_bias")  # q/k/v biases ride along the quantized matmul
    tokens = list(range(3, 40))
    logits = {}
    for fmt in FORMATS:
        runtime = load_tiny(tmp_path, "bf16", weights=fmt)
        session = runtime.new_session()
        logits[fmt] = runtime.prefill(session, tokens, all_logits=True).float()
        runtime.release(session)
        assert runtime.weights.format == fmt
    error = {fmt: ((logits[fmt] - logits["bf16"]).norm() / logits["bf16"].norm()).item() for fmt in ("int8", "int4")}
    # random weights, 4 and 8 bits: measured 1 % (int8) and 8 % (int4) relative logit error
    assert error["int8"] < 0.03 and error["int8"] < error["int4"] < 0.2

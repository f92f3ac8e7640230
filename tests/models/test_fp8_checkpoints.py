"""Block-scaled FP8 checkpoints (and DeepSeek V4's FP4 experts) of the tiny DeepSeek V4 and V3.2
models, quantized by tests/models/fp8_checkpoints.py: kvgate's dequantized weights equal a block by
block reference, and its logits match transformers 5.24 loading the same directory on CPU (which
dequantizes FP8 without a GPU). Partial blocks, which transformers cannot load, are checked against
kvgate on an fp32 copy holding the reference dequantization.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.models.fp8_checkpoints import (quantize_fp4, reference_dequantize, reference_dequantize_fp4,
                                          write_dequantized, write_fp8_copy)
from tests.models.tiny_deepseek_v4 import build_tiny_v4, load_tiny_v4
from tests.models.tiny_families import build_tiny_family, load_tiny_family
from tests.models.tiny_models import reference_logits

TOLERANCE = 1e-4
PROMPT = [(i * 37 + 11) % 97 for i in range(37)]
# V4-Flash's FP8 linears; its compressors, indexer head weights, routers and embeddings stay bf16
V4_FP8 = re.compile(r"\.attn\.(wq_a|wq_b|wkv|wo_a|wo_b|indexer\.wq_b)\.weight$|\.shared_experts\.w[123]\.weight$")
V4_EXPERTS = re.compile(r"\.experts\.\d+\.w[123]\.weight$")


def v3_linear(name: str, tensor) -> bool:
    return "layers." in name and not name.endswith(("mlp.gate.weight", "weights_proj.weight"))


@pytest.fixture(scope="module")
def v4(tmp_path_factory):
    directory = tmp_path_factory.mktemp("v4")
    return directory, build_tiny_v4(directory)


def transformers_logits(directory, tokens):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    assert all(p.dtype == torch.float32 for p in model.parameters())  # dequantized at load
    return reference_logits(model, tokens)


def kvgate_logits(runtime, tokens):
    return runtime.prefill(runtime.new_session(), tokens, all_logits=True)


def test_v4_fp8_weights_are_the_reference_dequantization_and_logits_match_transformers(v4, tmp_path):
    source, model = v4
    chosen = lambda name, t: bool(V4_FP8.search(name) or V4_EXPERTS.search(name))
    stored = write_fp8_copy(source, tmp_path / "fp8", chosen, (16, 16), scale_suffix=".scale")
    runtime = load_tiny_v4(tmp_path / "fp8")
    layer = runtime.weights.layers[1]
    expected = {"wq_a": layer.attention.q_down, "wkv": layer.attention.kv, "wo_a": layer.attention.o_a.flatten(0, 1),
                "indexer.wq_b": layer.attention.indexer.q_up, "shared_experts.w2": layer.moe.shared_down}
    for name, weight in expected.items():
        key = next(k for k in stored if k.endswith(f"layers.1.{'ffn' if 'experts' in name else 'attn'}.{name}.weight"))
        assert torch.equal(weight, reference_dequantize(*stored[key], (16, 16))), name
    experts = [reference_dequantize(*stored[f"model.layers.1.ffn.experts.{e}.w2.weight"], (16, 16)) for e in range(4)]
    assert torch.equal(layer.moe.down, torch.stack(experts))
    original = load_file(str(source / "model.safetensors"))["model.layers.1.attn.compressor.wkv.weight"]
    assert torch.equal(layer.attention.compressor.kv, original)  # a bf16 weight beside FP8 ones is as stored
    ours, theirs = kvgate_logits(runtime, PROMPT), transformers_logits(tmp_path / "fp8", PROMPT)
    assert torch.allclose(ours, theirs, atol=TOLERANCE, rtol=0)
    assert (ours - reference_logits(model, PROMPT)).abs().max() > 100 * TOLERANCE  # quantization shows


def test_v4_fp4_experts_dequantize_by_their_row_groups_and_logits_match_transformers(v4, tmp_path):
    source, _ = v4
    write_fp8_copy(source, tmp_path / "fp4", lambda name, t: bool(V4_FP8.search(name)), (16, 16), ".scale")
    tensors = load_file(str(tmp_path / "fp4" / "model.safetensors"))
    for name in [n for n in tensors if V4_EXPERTS.search(n)]:
        tensors[name], tensors[name.removesuffix(".weight") + ".scale"] = quantize_fp4(tensors[name])
    save_file(tensors, str(tmp_path / "fp4" / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((tmp_path / "fp4" / "config.json").read_text())
    config["quantization_config"].update(expert_dtype="fp4", scale_fmt="ue8m0")
    (tmp_path / "fp4" / "config.json").write_text(json.dumps(config))
    runtime = load_tiny_v4(tmp_path / "fp4")
    w1, scale = tensors["model.layers.2.ffn.experts.3.w1.weight"], tensors["model.layers.2.ffn.experts.3.w1.scale"]
    assert w1.dtype == torch.int8 and tuple(scale.shape) == (32, 2)
    assert torch.equal(runtime.weights.layers[2].moe.gate_up[3, :32], reference_dequantize_fp4(w1, scale))
    ours, theirs = kvgate_logits(runtime, PROMPT), transformers_logits(tmp_path / "fp4", PROMPT)
    assert torch.allclose(ours, theirs, atol=TOLERANCE, rtol=0)


def test_v32_fp8_logits_match_transformers_and_bf16_takes_the_rounded_dequantization(tmp_path):
    build_tiny_family(tmp_path / "v32", "deepseek_v32")
    stored = write_fp8_copy(tmp_path / "v32", tmp_path / "fp8", v3_linear, (8, 8))
    runtime = load_tiny_family(tmp_path / "fp8")
    indexer_q = reference_dequantize(*stored["model.layers.1.self_attn.indexer.wq_b.weight"], (8, 8))
    assert torch.equal(runtime.weights.layers[1].indexer.q_up, indexer_q)
    ours, theirs = kvgate_logits(runtime, PROMPT[:23]), transformers_logits(tmp_path / "fp8", PROMPT[:23])
    assert torch.allclose(ours, theirs, atol=TOLERANCE, rtol=0)
    bf16 = load_tiny_family(tmp_path / "fp8", dtype="bf16")
    assert bf16.weights.layers[1].indexer.q_up.dtype == torch.bfloat16
    assert torch.equal(bf16.weights.layers[1].indexer.q_up, indexer_q.to(torch.bfloat16))


def test_v3_partial_blocks_equal_the_fp32_checkpoint_of_their_values_exactly(tmp_path):
    build_tiny_family(tmp_path / "v3", "deepseek_v3")
    stored = write_fp8_copy(tmp_path / "v3", tmp_path / "fp8", v3_linear, (16, 16))
    _, scale = stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]
    assert tuple(scale.shape) == (3, 4)  # 40 rows: the third block row holds 8
    write_dequantized(tmp_path / "v3", tmp_path / "values", stored, (16, 16))
    quantized, values = load_tiny_family(tmp_path / "fp8"), load_tiny_family(tmp_path / "values")
    assert all(torch.equal(a, b) for a, b in zip(quantized.weights.named_tensors(), values.weights.named_tensors()))
    assert torch.equal(kvgate_logits(quantized, PROMPT), kvgate_logits(values, PROMPT))


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.pop("model.layers.1.self_attn.o_proj.weight_scale_inv"),
     "quantized weight model.layers.1.self_attn.o_proj.weight .* has no scale"),
    (lambda t: t.update({"model.layers.1.self_attn.o_proj.weight_scale_inv": torch.ones(4, 4)}),
     r"scale model.layers.1.self_attn.o_proj.weight_scale_inv has shape \(4, 4\).* needs \(8, 6\)"),
    (lambda t: t.update({"model.norm.weight_scale_inv": torch.ones(1)}), "scale model.norm.weight_scale_inv has no"),
    (lambda t: t["model.layers.0.self_attn.q_a_proj.weight_scale_inv"].fill_(float("inf")), "non-finite"),
])
def test_a_damaged_fp8_checkpoint_is_a_load_error_naming_the_tensor(tmp_path, damage, message):
    build_tiny_family(tmp_path / "v3", "deepseek_v3")
    write_fp8_copy(tmp_path / "v3", tmp_path / "fp8", v3_linear, (8, 8))
    tensors = load_file(str(tmp_path / "fp8" / "model.safetensors"))
    damage(tensors)
    save_file(tensors, str(tmp_path / "fp8" / "model.safetensors"))
    with pytest.raises(ValueError, match=message):
        load_tiny_family(tmp_path / "fp8")

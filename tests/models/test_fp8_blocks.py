"""kvgate.models.fp8_blocks on hand-made tensors: scale formats, per-tensor scales, and the load
errors of a quantization_config or a scale that disk gets wrong."""

from __future__ import annotations

import pytest
import torch

from kvgate.models.fp8_blocks import dequantize_checkpoint
from tests.models.fp8_checkpoints import quantize, quantize_fp4, reference_dequantize, reference_dequantize_fp4

BLOCK = {"quant_method": "fp8", "weight_block_size": [4, 4]}


def fp8_tensors(shape=(6, 10)):
    torch.manual_seed(0)
    values, inverse = quantize(torch.randn(shape), (4, 4))
    return {"l.weight": values, "l.weight_scale_inv": inverse, "n.weight": torch.ones(3)}, values, inverse


def test_blocks_dequantize_to_the_runtime_dtype_and_scales_are_dropped():
    tensors, values, inverse = fp8_tensors()
    norm = tensors["n.weight"]
    out = dequantize_checkpoint(tensors, {"quantization_config": BLOCK}, torch.bfloat16)
    assert set(out) == {"l.weight", "n.weight"} and out["n.weight"] is norm
    assert torch.equal(out["l.weight"], reference_dequantize(values, inverse, (4, 4)).to(torch.bfloat16))


def test_e8m0_scales_as_their_dtype_or_as_raw_exponent_bytes_give_the_same_weights():
    tensors, values, _ = fp8_tensors()
    powers = torch.tensor([[0.5, 2.0, 4.0], [0.25, 1.0, 8.0]])
    e8m0 = powers.to(torch.float8_e8m0fnu)
    config = {"quantization_config": BLOCK}
    as_e8m0 = dequantize_checkpoint({**tensors, "l.weight_scale_inv": e8m0}, config, torch.float32)
    as_bytes = dequantize_checkpoint({**tensors, "l.weight_scale_inv": e8m0.view(torch.uint8)}, config, torch.float32)
    assert torch.equal(as_e8m0["l.weight"], reference_dequantize(values, powers, (4, 4)))
    assert torch.equal(as_bytes["l.weight"], as_e8m0["l.weight"])


def test_without_a_block_size_one_scale_covers_the_tensor():
    values = torch.tensor([[1.0, -2.0], [0.5, 4.0]]).to(torch.float8_e4m3fn)
    out = dequantize_checkpoint({"p": values, "p_scale_inv": torch.tensor(0.5)},
                                {"quantization_config": {"quant_method": "fp8"}}, torch.float32)
    assert torch.equal(out["p"], torch.tensor([[0.5, -1.0], [0.25, 2.0]]))


def test_fp4_experts_declared_at_the_config_top_level_as_deepseek_v4_does():
    torch.manual_seed(1)
    packed, scale = quantize_fp4(torch.randn(3, 64))
    config = {"quantization_config": BLOCK, "expert_dtype": "fp4"}
    out = dequantize_checkpoint({"e.weight": packed, "e.scale": scale}, config, torch.float32)
    assert torch.equal(out["e.weight"], reference_dequantize_fp4(packed, scale))
    with pytest.raises(ValueError, match=r"e.scale has shape \(3, 1\).* needs \(3, 2\)"):
        dequantize_checkpoint({"e.weight": packed, "e.scale": scale[:, :1]}, config, torch.float32)
    untouched = dequantize_checkpoint({"e.weight": packed}, {"quantization_config": BLOCK}, torch.float32)
    assert untouched["e.weight"].dtype == torch.int8  # not declared FP4: left for the family to refuse


def test_a_checkpoint_without_quantized_weights_or_config_passes_through():
    tensors = {"w": torch.randn(2, 2)}
    assert dequantize_checkpoint(tensors, {}, torch.float32) is tensors


@pytest.mark.parametrize("config, change, message", [
    ({}, {}, "l.weight is torch.float8_e4m3fn but config.json has no quantization_config"),
    ({"quant_method": "awq"}, {}, "method 'awq' is not supported"),
    ({"quant_method": "fp8", "weight_block_size": [0, 4]}, {}, "weight_block_size must be two positive integers"),
    ({"quant_method": "fp8", "weight_block_size": 128}, {}, "weight_block_size must be two positive integers"),
    (BLOCK, {"l.weight_scale_inv": torch.ones(2, 3, dtype=torch.int32)}, "l.weight_scale_inv has dtype torch.int32"),
    (BLOCK, {"l.weight_scale_inv": torch.ones(3, 2)}, r"needs \(2, 3\)"),
    (BLOCK, {"l.weight": torch.ones(6).to(torch.float8_e4m3fn)}, "l.weight has shape \\(6,\\): block scales need"),
    (BLOCK, {"n.weight_scale_inv": torch.ones(1)}, "scale n.weight_scale_inv has no quantized weight"),
])
def test_a_wrong_config_or_scale_is_an_error_naming_it(config, change, message):
    tensors, _, _ = fp8_tensors()
    with pytest.raises(ValueError, match=message):
        dequantize_checkpoint({**tensors, **change}, {"quantization_config": config} if config else {}, torch.float32)

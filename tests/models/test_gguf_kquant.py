"""GGUF Q8_0 / Q4_K / Q5_K / Q6_K (and Q4_0 / Q4_1 / Q5_0 / Q5_1) blocks: read bit for bit as gguf-py reads them, and multiplied by
:class:`KQuantWeight` (native kernel and torch fallback) as the dense fp32 weight would be."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvgate.models.cpu_kernels.kquant import kquant_kernel
from kvgate.models.gguf_kquant import BLOCKS, TYPES, dequantize_rows, row_bytes
from kvgate.models.gguf_kquant_weight import KQuantWeight, StackedRows, kernel_arithmetic, kquant_cat_rows
from kvgate.models.quant_linear import linear
from tests.models.kquant_writer import quantize_rows

HALF_OFFSETS = {"Q8_0": (0,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
                "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2)}


def random_rows(type_name: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random valid raw rows: every byte random but the fp16 scales, which are finite."""
    rng = np.random.default_rng(seed)
    size = BLOCKS[type_name][1]
    raw = rng.integers(0, 256, (rows, row_bytes(type_name, cols)), dtype=np.uint8)
    blocks = raw.reshape(-1, size)
    for offset in HALF_OFFSETS[type_name]:
        halves = (rng.standard_normal(len(blocks)) * 0.05).astype(np.float16)
        blocks[:, offset:offset + 2] = halves[:, None].view(np.uint8)
    return raw


@pytest.mark.parametrize("type_name", TYPES)
def test_random_blocks_dequantize_bit_for_bit_as_gguf_py(type_name):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    raw = random_rows(type_name, 9, 768)
    expected = dequantize(raw, GGMLQuantizationType[type_name]).reshape(9, 768)
    got = dequantize_rows(torch.from_numpy(raw), type_name).numpy()
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("type_name", TYPES)
def test_the_test_encoder_writes_blocks_close_to_the_weights(type_name):
    weight = np.random.default_rng(1).standard_normal((4, 512)).astype(np.float32)
    back = dequantize_rows(torch.from_numpy(quantize_rows(weight, type_name)), type_name).numpy()
    steps = {"Q8_0": 0.03, "Q4_K": 0.4, "Q5_K": 0.2, "Q6_K": 0.12,  # about one quantization step
             "Q4_0": 0.5, "Q4_1": 0.4, "Q5_0": 0.25, "Q5_1": 0.2}
    assert np.abs(back - weight).max() < steps[type_name]


@pytest.mark.parametrize("type_name", TYPES)
def test_matmul_equals_the_dense_fp32_product(type_name):
    weight = KQuantWeight(torch.from_numpy(random_rows(type_name, 300, 512, seed=2)), type_name)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(3))
    dense = x @ dequantize_rows(weight.raw, type_name).T
    scale = dense.abs().max()
    for out in (weight.matmul(x), weight.torch_matmul(x)):
        assert out.shape == (5, 300) and out.dtype == torch.float32
        assert (out - dense).abs().max() <= 1e-5 * scale
    bf16 = linear(x.bfloat16(), weight)
    assert bf16.dtype == torch.bfloat16 and (bf16.float() - dense).abs().max() <= 1e-2 * scale


@pytest.mark.parametrize("path", ["kernel", "torch"])
def test_each_output_row_is_the_same_bits_whatever_the_batch(path):
    weight = KQuantWeight(torch.from_numpy(random_rows("Q4_K", 260, 512, seed=4)), "Q4_K")
    if path == "kernel" and kquant_kernel() is None:
        pytest.skip("no native kquant kernel on this machine")
    product = weight.matmul if path == "kernel" else weight.torch_matmul
    x = torch.randn(40, 512, generator=torch.Generator().manual_seed(5)).bfloat16()
    whole = product(x)
    for start, end in ((0, 1), (3, 4), (5, 22), (17, 40)):
        assert torch.equal(product(x[start:end]), whole[start:end]), (start, end)


def test_fused_rows_stack_one_type_or_keep_each_part():
    q4 = KQuantWeight(torch.from_numpy(random_rows("Q4_K", 64, 256, seed=6)), "Q4_K")
    q6 = KQuantWeight(torch.from_numpy(random_rows("Q6_K", 32, 256, seed=7)), "Q6_K")
    same = kquant_cat_rows([q4, q4])
    assert isinstance(same, KQuantWeight) and same.shape == (128, 256) and same.type_name == "Q4_K"
    mixed = kquant_cat_rows([q4, q6])
    assert isinstance(mixed, StackedRows) and mixed.shape == (96, 256)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(8))
    assert torch.equal(mixed.matmul(x), torch.cat([q4.matmul(x), q6.matmul(x)], -1))
    assert torch.equal(mixed.dequantize(torch.float32), torch.cat([q4.dequantize(torch.float32),
                                                                   q6.dequantize(torch.float32)]))
    assert kquant_cat_rows([q4, torch.zeros(8, 256)]) is None


def test_unknown_types_and_ragged_rows_are_clear_errors():
    with pytest.raises(ValueError, match="Q2_K"):
        dequantize_rows(torch.zeros(2, 84, dtype=torch.uint8), "Q2_K")
    with pytest.raises(ValueError, match="multiples of 256"):
        row_bytes("Q4_K", 576)


def test_the_fingerprinted_arithmetic_names_the_native_kernels_arithmetic_and_variant():
    kernel = kquant_kernel()
    if kernel is None:
        assert kernel_arithmetic() == "torch"
    else:
        assert kernel_arithmetic() == f"/kquant1-{kernel.variant}"

"""The native layer's int8-activation arithmetic on repacked weights (``q8i.h``), compiled for real:
every variant this CPU runs gives the plain C variant's bits at every row count and on rows whose
rounding ties, overflows or is NaN; row i depends only on x[i]; for the 32-weight block types the
result is what the header's definition computes (written out here in numpy); and for every type the
error against the exact product stays within the bound x's rounding to int8 allows (a weight read
from the wrong place would break it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from kvgate.models.cpu_kernels import build
from kvgate.models.cpu_kernels.kquant import TYPES, VARIANTS
from kvgate.models.cpu_kernels.kquant_samples import random_blocks
from kvgate.models.cpu_kernels.llama_layer import llama_layer_variant
from kvgate.models.gguf_kquant import dequantize_rows
from kvgate.models.gguf_kquant_weight import KQuantWeight
from tests.models.test_kquant_q8a import COLS, bits, quantized_x, weight_ints  # q8a rounds x and reads blocks alike

pytestmark = pytest.mark.skipif(llama_layer_variant("scalar") is None, reason="no C compiler for the native layer")
RUNNABLE = [name for name, (cpu_flags, _) in VARIANTS.items() if build.cpu_has(cpu_flags)]
ROW_COUNTS = (*range(1, 10), 17, 33)  # every remainder of the 8-row tile, and several tiles
OUT = 37  # a partial group of 16; COLS (768): three K-quant super-blocks, 24 blocks of 32
BLOCKS_OF_32 = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # the definition is written out here for these


@pytest.fixture(scope="module")
def samples():
    generator = torch.Generator().manual_seed(31)
    x = torch.randn(max(ROW_COUNTS), COLS, generator=generator) * torch.rand(max(ROW_COUNTS), 1, generator=generator)
    x[0, :32] = 0  # a block of zeros: dx = 0
    x[1, 5] = 1e4  # one outlier that flattens its block
    x[2, 32:64] = torch.tensor([127.0] + [k + 0.5 for k in range(-15, 16)])  # dx = 1: ties, rounded away from 0
    x[3, 64:96] = torch.tensor([0.5, -0.5, 1.5, -2.5] * 7 + [127.0, 3.5, -4.5, 0.0])
    return x, {name: random_blocks(name, OUT, COLS, generator) for name in TYPES}


def matmul(variant: str, x: torch.Tensor, raw: torch.Tensor, type_name: str) -> torch.Tensor:
    kernel = llama_layer_variant(variant)
    code = TYPES[type_name][0]
    return kernel.q8i_matmul(x, kernel.q8i_repack(raw, code, OUT, COLS), code, OUT)


def by_definition(x: torch.Tensor, raw: torch.Tensor, type_name: str) -> np.ndarray:
    f32, f64 = np.float32, np.float64
    ints, dw, mw = weight_ints(raw, type_name)
    blocks, with_min = COLS // 32, type_name in ("Q4_1", "Q5_1")
    out = np.zeros((x.shape[0], OUT), dtype=f32)
    for i in range(x.shape[0]):
        q, dx, sx = quantized_x(x[i].numpy())
        for n in range(OUT):
            acc, mins = f32(0), f32(0)
            for b in range(blocks):
                s = int((ints[n * blocks + b] * q[b]).sum())  # sum(u * q) - o * sum(q)
                acc = f32(f64(f32(dw[n * blocks + b] * dx[b])) * f64(f32(s)) + f64(acc))  # fma: one rounding
                mins = f32(f64(mw[n * blocks + b]) * f64(sx[b]) + f64(mins))
            out[i, n] = f32(acc + mins) if with_min else acc
    return out


@pytest.mark.parametrize("type_name", list(TYPES))
def test_every_variant_gives_the_plain_bits_row_by_row_at_every_row_count(samples, type_name):
    x, weights = samples
    alone = torch.cat([matmul("scalar", x[i:i + 1], weights[type_name], type_name) for i in range(len(x))])
    assert torch.isfinite(alone).all()
    for variant in RUNNABLE:
        for rows in ROW_COUNTS:
            got = matmul(variant, x[:rows], weights[type_name], type_name)
            assert torch.equal(bits(got), bits(alone[:rows])), (variant, rows)
    if type_name in BLOCKS_OF_32:
        assert np.array_equal(alone[:5].numpy().view(np.int32), by_definition(x[:5], weights[type_name],
                                                                                  type_name).view(np.int32))


def test_rows_with_infinity_and_nan_give_every_variant_the_same_bits(samples):
    x, weights = samples
    odd = x[:3].clone()
    odd[0, 7], odd[1, 40], odd[2, 100] = float("inf"), float("nan"), -float("inf")
    results = [matmul(variant, odd, weights["Q5_0"], "Q5_0") for variant in RUNNABLE]
    for got in results[1:]:
        assert torch.equal(bits(got), bits(results[0]))
    assert torch.isfinite(results[0]).sum() < results[0].numel()  # the odd values do reach the outputs


@pytest.mark.parametrize("type_name", list(TYPES))
def test_error_against_the_exact_product_is_within_x_rounding(samples, type_name):
    x, weights = samples
    w = torch.from_numpy(quants.dequantize(weights[type_name].numpy(), GGMLQuantizationType[type_name]).copy())
    w = w.reshape(OUT, COLS).double()
    variant = "amx" if "amx" in RUNNABLE else RUNNABLE[0]
    got = matmul(variant, x, weights[type_name], type_name).double()
    exact = x.double() @ w.T
    half_step = (x.double().reshape(len(x), -1, 32).abs().amax(dim=2) / 127 / 2).repeat_interleave(32, dim=1)
    bound = (half_step * 1.0001) @ w.abs().T + 1e-5 * (x.double().abs() @ w.abs().T)
    error = (got - exact).abs()
    assert (error <= bound).all()
    assert error.max() > bound.max() * 1e-3  # int8 rounding is really there: not an fp32 arithmetic


@pytest.mark.parametrize("type_name", list(TYPES))
def test_a_weight_handed_to_the_native_layer_reads_back_the_same_rows(samples, type_name):
    _, weights = samples
    raw, kernel, code = weights[type_name], llama_layer_variant("scalar"), TYPES[type_name][0]
    weight = KQuantWeight(raw.clone(), type_name)
    ids = torch.tensor([0, 36, 15, 16, 17, 5, 5])  # both sides of a group of 16, the last row, one twice
    before, whole = weight.rows(ids), weight.dequantize(torch.float32)
    packed = weight.native_blocks(lambda blocks: kernel.q8i_repack(blocks, code, OUT, COLS),
                                  lambda blocks, rows: kernel.q8i_rows(blocks, code, weight.shape, rows))
    assert weight.raw is None and packed.numel() > 0
    assert torch.equal(bits(before), bits(dequantize_rows(raw[ids], type_name)))
    assert torch.equal(bits(weight.rows(ids)), bits(before))
    assert torch.equal(bits(weight.dequantize(torch.float32)), bits(whole))
    x = torch.randn(3, COLS)
    assert torch.equal(weight.matmul(x), KQuantWeight(raw, type_name).torch_matmul(x))  # the fallback's bits
    with pytest.raises(IndexError, match="0..36"):
        weight.rows(torch.tensor([37]))

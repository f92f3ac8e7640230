"""The kquant kernel's int8-activation arithmetic (``kquant_kernel(arithmetic="q8a")``), compiled for
real: every variant this CPU runs equals the scalar C reference bit for bit at every row count, row
i depends only on x[i], the result is what the docstring's definition computes (written out here in
numpy), and its error against the exact product stays within the bound x's rounding allows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from kvgate.models.cpu_kernels import build
from kvgate.models.cpu_kernels.kquant import Q8A_TYPES, VARIANTS, kquant_kernel, kquant_variant
from kvgate.models.cpu_kernels.kquant_samples import random_blocks

pytestmark = pytest.mark.skipif(not build.cpu_has(build.REQUIRED_CPU_FLAGS), reason="CPU without AVX2/FMA")
RUNNABLE = [name for name, (cpu_flags, _) in VARIANTS.items() if build.cpu_has(cpu_flags)]
ROW_COUNTS = (*range(1, 10), 33, 64)
OUT, COLS = 37, 768  # an odd N leaves a partial column tile; K three K-quant super-blocks, 24 blocks
BLOCKS_OF_32 = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # the definition is written out here for these


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


@pytest.fixture(scope="module")
def samples():
    generator = torch.Generator().manual_seed(29)
    x = torch.randn(max(ROW_COUNTS), COLS, generator=generator) * torch.rand(max(ROW_COUNTS), 1, generator=generator)
    x[0, :32] = 0  # a block of zeros: dx = 0
    x[1, 5] = 1e4  # one outlier that flattens its block
    x[2, 32:64] = torch.tensor([127.0] + [k + 0.5 for k in range(-15, 16)])  # dx = 1: ties, rounded away from 0
    return x, {name: random_blocks(name, OUT, COLS, generator) for name in Q8A_TYPES}


def quantized_x(x: np.ndarray):
    """The docstring's activation quantization, in numpy fp32 (np.round is half-even: adjust to away)."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(blocks).max(axis=1) / np.float32(127)).astype(np.float32)
    inverse = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    scaled = (blocks * inverse[:, None]).astype(np.float32)
    q = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5)), -127, 127).astype(np.int64)
    return q, d, (d * q.sum(axis=1).astype(np.float32)).astype(np.float32)


def weight_ints(raw: torch.Tensor, type_name: str):
    """Per block: the integer weights, dw and mw (0 without a min), read through gguf-py's dequantize."""
    blocks = raw.numpy().reshape(-1, raw.shape[1] // (COLS // 32))
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)[:, 0]
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)[:, 0] if type_name in ("Q4_1", "Q5_1") else 0 * d
    unit = blocks.copy()  # d = 1, m = 0: dequantize gives the integers themselves
    unit[:, 0:2] = np.frombuffer(np.float16(1).tobytes(), np.uint8)
    if type_name in ("Q4_1", "Q5_1"):
        unit[:, 2:4] = 0
    ints = quants.dequantize(unit, GGMLQuantizationType[type_name]).reshape(-1, 32).astype(np.int64)
    return ints, d, m


def by_definition(x: torch.Tensor, raw: torch.Tensor, type_name: str) -> np.ndarray:
    f32 = np.float32
    ints, dw, mw = weight_ints(raw, type_name)
    blocks = COLS // 32
    out = np.zeros((x.shape[0], OUT), dtype=f32)
    for i in range(x.shape[0]):
        q, dx, sx = quantized_x(x[i].numpy())
        for n in range(OUT):
            lanes, mins = np.zeros(8, dtype=f32), f32(0)
            for b in range(blocks):
                w = ints[n * blocks + b]
                sums = (w * q[b]).reshape(8, 4).sum(axis=1).astype(f32)
                scale = f32(dw[n * blocks + b] * dx[b])
                lanes = (np.float64(scale) * sums + lanes).astype(f32)  # an fma: one rounding of the exact value
                mins = f32(np.float64(mw[n * blocks + b]) * sx[b] + mins)
            lanes = (lanes[:4] + lanes[4:]).astype(f32)
            lanes = (lanes[:2] + lanes[2:]).astype(f32)
            out[i, n] = f32(f32(lanes[0] + lanes[1]) + mins)
    return out


@pytest.mark.parametrize("type_name", Q8A_TYPES)
def test_every_variant_is_the_scalar_reference_row_invariant_and_the_definition(samples, type_name):
    x, weights = samples
    raw = weights[type_name]
    reference = kquant_variant("scalar", "q8a")
    alone = torch.cat([reference.matmul(x[i:i + 1], raw, type_name, OUT) for i in range(len(x))])
    for variant in RUNNABLE:
        kernel = kquant_variant(variant, "q8a")
        for rows in ROW_COUNTS:
            got = kernel.matmul(x[:rows], raw, type_name, OUT)
            assert torch.equal(bits(got), bits(alone[:rows])), (variant, rows)
    if type_name in BLOCKS_OF_32:
        assert np.array_equal(alone[:4].numpy().view(np.int32), by_definition(x[:4], raw, type_name).view(np.int32))


@pytest.mark.parametrize("type_name", Q8A_TYPES)
def test_error_against_the_exact_product_is_within_x_rounding(samples, type_name):
    x, weights = samples
    w = torch.from_numpy(quants.dequantize(weights[type_name].numpy(), GGMLQuantizationType[type_name]).copy())
    w = w.reshape(OUT, COLS).double()
    got = kquant_kernel("q8a").matmul(x, weights[type_name], type_name, OUT).double()
    exact = x.double() @ w.T
    half_step = (x.double().reshape(len(x), -1, 32).abs().amax(dim=2) / 127 / 2).repeat_interleave(32, dim=1)
    bound = (half_step * 1.0001) @ w.abs().T + 1e-5 * (x.double().abs() @ w.abs().T)
    error = (got - exact).abs()
    assert (error <= bound).all()
    assert error.max() > bound.max() * 1e-3  # int8 rounding is really there: not the fp32 arithmetic


def test_q8a_has_its_own_fingerprint_is_not_the_default_and_refuses_bad_shapes(samples):
    x, weights = samples
    fp32, q8a = kquant_kernel(), kquant_kernel("q8a")
    assert q8a.fingerprint.startswith("/kquant1-q8a-") and q8a.fingerprint != fp32.fingerprint
    assert q8a.variant == ("avx512vnni" if "avx512vnni" in RUNNABLE else "avx2")
    assert fp32.variant != "avx512vnni"  # the default arithmetic's choice is unchanged
    assert q8a.takes(x[:, :512], "Q4_K") and not q8a.takes(x[:, :288], "Q4_K") and not q8a.takes(x, "IQ2_XS")
    with pytest.raises(ValueError, match="q8a takes Q8_0/.*Q6_K.* weights .* multiple of the Q6_K block"):
        q8a.matmul(x[:, :288], random_blocks("Q6_K", 3, 512, torch.Generator()), "Q6_K", 3)
    with pytest.raises(ValueError, match="no kquant arithmetic 'int4'"):
        kquant_kernel("int4")
    bf16 = x[:5].bfloat16()
    assert torch.equal(bits(q8a.matmul(bf16, weights["Q4_0"], "Q4_0", OUT)),
                       bits(q8a.matmul(bf16.float(), weights["Q4_0"], "Q4_0", OUT)))

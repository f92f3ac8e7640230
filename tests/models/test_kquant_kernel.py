"""kvgate's own GGUF-block matmul (:mod:`kvgate.models.cpu_kernels.kquant`), compiled for real: every
variant this CPU runs equals the scalar C reference bit for bit at every row count, row i depends
only on x[i], weights decode exactly as gguf-py's ``dequantize`` does, and the result is within the
fp32 rounding bound of the exact product."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from kvgate.models.cpu_kernels import build, kquant
from kvgate.models.cpu_kernels.kquant import TYPES, VARIANTS, kquant_kernel, kquant_variant
from kvgate.models.cpu_kernels.kquant_samples import HALF_SCALE_OFFSETS, random_blocks

pytestmark = pytest.mark.skipif(not build.cpu_has(build.REQUIRED_CPU_FLAGS), reason="CPU without AVX2/FMA")
RUNNABLE = [name for name, (cpu_flags, _) in VARIANTS.items() if build.cpu_has(cpu_flags)]
ROW_COUNTS = (*range(1, 41), 64, 129)
OUT, COLS = 37, 512  # an odd N leaves a partial column tile; K two K-quant super-blocks


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def gguf_dequantize(raw: torch.Tensor, type_name: str, cols: int) -> torch.Tensor:
    values = quants.dequantize(raw.numpy(), GGMLQuantizationType[type_name])
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(-1, cols)


EDGE_HALVES = (0x0001, 0x83FF, 0x0000, 0x8000)  # fp16 subnormals, +0 and -0 as the first scale of rows 0-3


def with_edge_scales(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    offset = HALF_SCALE_OFFSETS[type_name][0]
    for row, half in enumerate(EDGE_HALVES):
        raw[row, offset:offset + 2] = torch.tensor([half & 0xFF, half >> 8], dtype=torch.uint8)
    return raw


@pytest.fixture(scope="module")
def samples():
    generator = torch.Generator().manual_seed(29)
    x = torch.randn(max(ROW_COUNTS), COLS, generator=generator)
    return x, {name: with_edge_scales(random_blocks(name, OUT, COLS, generator), name) for name in TYPES}


@pytest.mark.parametrize("type_name", list(TYPES))
def test_every_variant_is_the_scalar_reference_and_row_invariant(samples, type_name):
    x, weights = samples
    raw = weights[type_name]
    reference = kquant_variant("scalar")
    alone = torch.cat([reference.matmul(x[i:i + 1], raw, type_name, OUT) for i in range(len(x))])
    for variant in RUNNABLE:
        kernel = kquant_variant(variant)
        for rows in ROW_COUNTS:
            got = kernel.matmul(x[:rows], raw, type_name, OUT)
            assert torch.equal(bits(got), bits(alone[:rows])), (variant, rows)


@pytest.mark.parametrize("type_name", [name for name, (_, weights, _) in TYPES.items() if weights == 32])
def test_a_row_of_more_blocks_than_one_run_of_scales_gives_the_scalar_bits(type_name):
    """576 weights are 18 blocks of 32: one x row reads the scales of 16 blocks at once, then of the
    last 2 (SCALE_RUN in kquant_rows.h), the partial run included; fp16 edge scales in both runs."""
    generator = torch.Generator().manual_seed(576)
    raw = with_edge_scales(random_blocks(type_name, OUT, 576, generator), type_name)
    block_bytes = TYPES[type_name][2]
    raw[4:8, 17 * block_bytes:17 * block_bytes + 2] = raw[0:4, 0:2]  # the edge scales again, in the last block
    x = torch.randn(3, 576, generator=generator)
    expected = torch.cat([kquant_variant("scalar").matmul(x[i:i + 1], raw, type_name, OUT) for i in range(3)])
    for variant in RUNNABLE:
        for rows in (1, 3, 5, 8):
            got = kquant_variant(variant).matmul(x[:rows], raw, type_name, OUT)
            assert torch.equal(bits(got), bits(expected[:rows])), (variant, rows)


@pytest.mark.parametrize("type_name", list(TYPES))
def test_weights_decode_as_gguf_py_and_products_are_within_fp32_rounding(samples, type_name):
    x, weights = samples
    expected_weights = gguf_dequantize(weights[type_name], type_name, COLS)
    kernel = kquant_kernel()
    # x = identity: every output is one weight times 1 plus zeros, so it is the decoded weight itself
    decoded = kernel.matmul(torch.eye(COLS), weights[type_name], type_name, OUT).T
    assert torch.equal(decoded, expected_weights)
    got = kernel.matmul(x, weights[type_name], type_name, OUT).double()
    exact = x.double() @ expected_weights.double().T
    # a chain of K/16 fmas and 4 tree adds: each step rounds by at most 2^-24 of the magnitudes summed
    bound = (COLS / 16 + 4) * 2.0 ** -24 * (x.double().abs() @ expected_weights.double().abs().T)
    assert ((got - exact).abs() <= bound).all()
    assert (got - exact).abs().max() > 0  # the bound is not vacuous: fp32 does round here


def test_bf16_rows_and_thread_counts_give_the_same_bits(samples):
    x, weights = samples
    kernel = kquant_kernel()
    rows = x[:9].bfloat16()
    expected = kernel.matmul(rows.float(), weights["Q4_K"], "Q4_K", OUT)
    assert torch.equal(bits(kernel.matmul(rows, weights["Q4_K"], "Q4_K", OUT)), bits(expected))
    threads = torch.get_num_threads()
    big = random_blocks("Q6_K", 1024, 1024, torch.Generator().manual_seed(5))
    wide = torch.randn(3, 1024)
    try:
        torch.set_num_threads(1)
        one = [kernel.matmul(wide, big, "Q6_K", 1024), kernel.matmul(wide[:1], big, "Q6_K", 1024)]
        torch.set_num_threads(2)
        assert torch.equal(bits(kernel.matmul(wide, big, "Q6_K", 1024)), bits(one[0]))
        assert torch.equal(bits(kernel.matmul(wide[:1], big, "Q6_K", 1024)), bits(one[1]))  # the one-row path
    finally:
        torch.set_num_threads(threads)


def test_takes_only_what_it_computes_and_names_the_bad_weight(samples):
    x, weights = samples
    kernel = kquant_kernel()
    assert kernel.takes(x, "Q8_0") and kernel.takes(x.bfloat16(), "Q6_K")
    assert not kernel.takes(x[:, :288], "Q4_K")  # K not a multiple of 256
    assert not kernel.takes(x.half(), "Q8_0") and not kernel.takes(x, "IQ2_XS")
    strided = x.T.contiguous().T  # the same values, column-major
    assert kernel.takes(strided, "Q8_0")
    assert torch.equal(bits(kernel.matmul(strided, weights["Q8_0"], "Q8_0", OUT)),
                       bits(kernel.matmul(x, weights["Q8_0"], "Q8_0", OUT)))
    assert not kernel.takes(x[:, :0], "Q8_0")
    with pytest.raises(ValueError, match=r"Q4_K weight must be contiguous uint8 \[36, 288\] on CPU"):
        kernel.matmul(x, weights["Q4_K"], "Q4_K", 36)
    with pytest.raises(ValueError, match="multiple of the Q4_K block"):
        kernel.matmul(x[:, :288], weights["Q4_K"], "Q4_K", OUT)


def test_the_best_variant_is_chosen_named_in_the_fingerprint_and_can_be_forced(monkeypatch):
    best = "avx512" if "avx512" in RUNNABLE else "avx2"
    kernel = kquant_kernel()
    assert kernel.variant == best and kernel.fingerprint == f"/kquant1-{best}"
    assert len({kquant_variant(name).fingerprint for name in RUNNABLE}) == len(RUNNABLE)
    monkeypatch.setenv(kquant.VARIANT_ENV, "avx2")
    kquant_kernel.cache_clear()
    try:
        assert kquant_kernel().variant == "avx2"
        monkeypatch.setenv(kquant.VARIANT_ENV, "avx9000")
        kquant_kernel.cache_clear()
        assert kquant_kernel() is None
    finally:
        monkeypatch.delenv(kquant.VARIANT_ENV)
        kquant_kernel.cache_clear()
    assert kquant_kernel().variant == best


@pytest.mark.parametrize("fault", ["no compiler", "cache not writable"])
def test_fault_injection_without_a_compiler_or_a_cache_gives_none_and_one_log_line(fault, tmp_path, monkeypatch,
                                                                                   caplog):
    if fault == "no compiler":
        monkeypatch.setenv("CC", "no-such-compiler-kvgate")
    else:
        (tmp_path / "a-file").write_text("")
        monkeypatch.setenv("KVGATE_KERNEL_CACHE", str(tmp_path / "a-file"))  # a file where the folder should be
    caches = (build.load, kquant_variant, kquant_kernel)
    for cache in caches:
        cache.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="kvgate.kernels"):
            assert kquant_kernel() is None
        assert len(caplog.records) == 1 and "kquant.c not built" in caplog.records[0].getMessage()
    finally:
        for cache in caches:
            cache.cache_clear()

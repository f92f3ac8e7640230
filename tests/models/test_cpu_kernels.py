"""The own CPU kernels (:mod:`kvgate.models.cpu_kernels`): compiled for real with the machine's C
compiler, and equal to the torch kernels they stand in for, bit for bit, on the embedded model's
real weights and on every row count the engine runs (one decode row to a prefill chunk)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from kvgate.models.cpu_kernels import build
from kvgate.models.cpu_kernels.int4 import GROUP, Int4Gemm, int4_kernel, same_as_torch
from kvgate.models.cpu_kernels.int8 import int8_kernel
from kvgate.models.cpu_kernels.rms_norm import rms_norm_kernel
from kvgate.models.quant_linear import Int4Weight, Int8Weight

ROWS = (1, 2, 3, 4, 5, 6, 7, 13, 64, 257)
needs_kernels = pytest.mark.skipif(not build.cpu_has(build.REQUIRED_CPU_FLAGS), reason="CPU without AVX2/FMA")


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


@pytest.fixture(scope="module")
def smollm2_layer(smollm2_model_cache):
    """The first layer's int4 linears and the int8 head of the embedded model, as the runtime loads them."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    runtime = load_runtime(resolve_source(""), ModelConfig(weights="int4", max_context=4096),
                           EngineConfig(kv_pool_tokens=1024), smollm2_model_cache)
    layer = runtime.weights.layers[0]
    return {"qkv": layer.qkv, "o": layer.o, "gate_up": layer.gate_up, "down": layer.down,
            "head": runtime.weights.lm_head}


@needs_kernels
def test_on_this_machine_the_kernels_are_built_and_pass_their_check():
    # Where torch's build is the AVX2 one (this project's CI machines), the own kernels must be in use:
    # a silent fall back to torch's would leave decode at its old speed.
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        pytest.skip(f"torch runs its {torch.backends.cpu.get_cpu_capability()} kernels here; the own kernels mirror AVX2")
    assert int4_kernel() is not None
    assert int8_kernel() is not None


@needs_kernels
@pytest.mark.slow
def test_int4_kernel_equals_torch_on_the_model_weights(smollm2_layer):
    kernel = int4_kernel()
    if kernel is None:
        pytest.skip("the int4 kernel does not match torch's arithmetic on this CPU (torch's is used)")
    generator = torch.Generator().manual_seed(0)
    for name in ("qkv", "o", "gate_up", "down"):
        weight = smollm2_layer[name]
        assert isinstance(weight, Int4Weight)
        for rows in ROWS:
            x = (torch.randn(rows, weight.shape[1], generator=generator) * 3).bfloat16()
            expected = torch.ops.aten._weight_int4pack_mm_for_cpu(x, weight.packed, GROUP, weight.scale_zeros)
            assert torch.equal(bits(weight.matmul(x)), bits(expected)), (name, rows)


@needs_kernels
@pytest.mark.slow
def test_int8_kernel_equals_torch_on_the_model_head(smollm2_layer):
    kernel = int8_kernel()
    if kernel is None:
        pytest.skip("the int8 kernel does not match torch's arithmetic on this CPU (torch's is used)")
    if torch.backends.cpu.get_cpu_capability() != "AVX2":  # it mirrors torch's AVX2 kernel only
        pytest.skip(f"torch runs its {torch.backends.cpu.get_cpu_capability()} kernel here, not the AVX2 one mirrored")
    head = smollm2_layer["head"]
    assert isinstance(head, Int8Weight)
    generator = torch.Generator().manual_seed(1)
    for rows in (1, 2, 8, 9):
        x = torch.randn(rows, head.shape[1], generator=generator).bfloat16()
        expected = torch.ops.aten._weight_int8pack_mm(x, head.q, head.scales)
        assert torch.equal(bits(head.matmul(x)), bits(expected)), rows


@needs_kernels
def test_a_kernel_that_rounds_differently_is_refused():
    kernel = int4_kernel()
    if kernel is None:
        pytest.skip("no int4 kernel on this CPU")

    class OffByOneUlp(Int4Gemm):
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, x, packed, scale_zeros, out_features):
            out = self.inner(x, packed, scale_zeros, out_features)
            flipped = bits(out).clone()
            flipped[-1, -1] ^= 1  # the lowest mantissa bit of one output
            return flipped.view(torch.bfloat16)

    assert same_as_torch(kernel)
    assert not same_as_torch(OffByOneUlp(kernel))


@needs_kernels
def test_build_caches_the_object_and_falls_back_without_a_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("KVGATE_KERNEL_CACHE", str(tmp_path))
    build.load.cache_clear()
    try:
        lib = build.load("int8_gemm.c")
        assert isinstance(lib, ctypes.CDLL)
        built = list(tmp_path.glob("int8_gemm-*.so"))
        assert len(built) == 1 and not list(tmp_path.glob("*.so.*")) and len(list(tmp_path.iterdir())) == 1
        stamp = built[0].stat().st_mtime_ns
        build.load.cache_clear()
        assert build.load("int8_gemm.c") is not None
        assert built[0].stat().st_mtime_ns == stamp  # loaded from the cache, not compiled again

        monkeypatch.setenv("CC", "no-such-compiler-kvgate")
        build.load.cache_clear()
        assert build.load("int4_gemm.c") is None
    finally:
        build.load.cache_clear()


@needs_kernels
def test_rms_norm_is_row_invariant_and_rounds_as_torch_does():
    kernel = rms_norm_kernel()
    assert kernel is not None  # own arithmetic: it only needs the compiler and AVX2
    generator = torch.Generator().manual_seed(3)
    x = (torch.randn(300, 576, generator=generator) * 3).bfloat16()
    weight = torch.randn(576, generator=generator).bfloat16()
    together = kernel(x, weight, 1e-5)
    for rows in (slice(0, 1), slice(7, 8), slice(5, 69), slice(299, 300)):  # alone, few, >= 64 (threaded)
        assert torch.equal(bits(kernel(x[rows].contiguous(), weight, 1e-5)), bits(together[rows]))
    expected = torch.nn.functional.rms_norm(x, weight.shape, weight, 1e-5)
    differ = together != expected
    assert differ.float().mean() < 1e-3  # only the sum of squares is taken in another order
    assert ((together.float() - expected.float()).abs()[differ] <= expected.float().abs()[differ] * 2 ** -7).all()


@needs_kernels
@pytest.mark.slow
@pytest.mark.skipif(not build.cpu_has(("avx512f",)), reason="CPU without AVX-512")
def test_int8_avx512_path_gives_the_avx2_builds_bits_on_the_model_head(smollm2_layer):
    """The AVX-512 build holds two columns' eight lanes in one register; every lane's chain is the
    AVX2 build's, so the outputs are its bits, for the fused (1-2 rows) and the buffered paths."""
    from kvgate.models.cpu_kernels.int8 import Int8Gemm

    avx2, avx512 = (Int8Gemm(build.load("int8_gemm.c", flags)) for flags in (build.FLAGS, build.AVX512_FLAGS))
    head = smollm2_layer["head"]
    generator = torch.Generator().manual_seed(2)
    for rows in (1, 2, 3, 8, 9):
        x = torch.randn(rows, head.shape[1], generator=generator).bfloat16()
        for q, scales in ((head.q, head.scales), (head.q[:77], head.scales[:77])):  # 77: 13 columns past 64
            assert torch.equal(bits(avx512(x, q, scales)), bits(avx2(x, q, scales))), (rows, q.shape[0])

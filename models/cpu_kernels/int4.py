"""torch's int4 weight-only matmul, computed by ``int4_gemm.c`` where that gives the same bits.

:func:`int4_kernel` compiles the C kernel, then runs it beside
``torch.ops.aten._weight_int4pack_mm_for_cpu`` on random weights of several shapes and row counts;
only if every output is bit-identical is it used. The kernel replicates the arithmetic of torch's
AVX2 build and reads its packed layout, so on a CPU where torch packs or rounds otherwise (AVX-512)
the check fails and torch's own kernel stays: no output ever depends on which one ran, which is
what keeps prefill, decode and cached state bit-identical (``[engine] deterministic``).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from kvgate.models.cpu_kernels.build import checked_kernel

GROUP = 32
PROBES = ((64, 64, (1, 2, 5)), (128, 96, (1, 3, 4, 7, 13)))  # (N, K, row counts)


class Int4Gemm:
    """``x @ W.T`` for x bf16 [M, K] and W in torch's int4pack layout with bf16 (scale, zero) pairs."""

    def __init__(self, lib: ctypes.CDLL):
        self.function = lib.int4_gemm
        self.function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5
        self.function.restype = None

    def takes(self, x: torch.Tensor, packed: torch.Tensor, scale_zeros: torch.Tensor, out_features: int) -> bool:
        return (x.dtype == torch.bfloat16 and x.dim() == 2 and x.is_contiguous() and out_features % 64 == 0
                and x.shape[1] % GROUP == 0 and packed.is_contiguous() and scale_zeros.is_contiguous()
                and scale_zeros.dtype == torch.bfloat16)

    def __call__(self, x: torch.Tensor, packed: torch.Tensor, scale_zeros: torch.Tensor, out_features: int) -> torch.Tensor:
        rows, cols = x.shape
        out = torch.empty(rows, out_features, dtype=torch.bfloat16)
        self.function(x.data_ptr(), packed.data_ptr(), scale_zeros.data_ptr(), out.data_ptr(),
                      rows, out_features, cols, GROUP, torch.get_num_threads())
        return out


def same_as_torch(kernel: Int4Gemm) -> bool:
    """Whether the kernel's output equals torch's bit for bit on every probe shape."""
    generator = torch.Generator().manual_seed(1234)
    for out_features, cols, row_counts in PROBES:
        q = torch.randint(0, 16, (out_features, cols), dtype=torch.int32, generator=generator)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        scale_zeros = torch.randn(cols // GROUP, out_features, 2, generator=generator).bfloat16()
        for rows in row_counts:
            x = torch.randn(rows, cols, generator=generator).bfloat16()
            expected = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, scale_zeros)
            if not torch.equal(kernel(x, packed, scale_zeros, out_features).view(torch.int16), expected.view(torch.int16)):
                return False
    return True


@functools.lru_cache(maxsize=None)
def int4_kernel() -> Optional[Int4Gemm]:
    """The compiled kernel where it matches torch bit for bit on this machine, else None."""
    return checked_kernel("int4_gemm.c", Int4Gemm, same_as_torch)

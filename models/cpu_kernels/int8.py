"""torch's int8 weight-only matmul, computed by ``int8_gemm.c`` where that gives the same bits.

As with :mod:`.int4`: :func:`int8_kernel` runs the compiled kernel beside
``torch.ops.aten._weight_int8pack_mm`` on random weights and uses it only if every output is
bit-identical on this machine. Where the CPU has AVX-512 the kernel is built with it: two columns'
eight lanes share a register, every lane's chain unchanged, so its bits are the AVX2 build's.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch

from kvgate.models.cpu_kernels.build import AVX512_FLAGS, FLAGS, checked_kernel, cpu_has

PROBES = ((8, 64, (1, 3)), (77, 576, (1, 2, 5, 9)))  # (N, K, row counts); 77: 4 blocks of 16 and 13 columns


class Int8Gemm:
    """``x @ (q * scales[:, None]).T`` for x bf16 [M, K], q int8 [N, K], scales bf16 [N]."""

    def __init__(self, lib: ctypes.CDLL):
        self.function = lib.int8_gemm
        self.function.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4
        self.function.restype = None

    def takes(self, x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> bool:
        return (x.dtype == torch.bfloat16 and x.dim() == 2 and x.is_contiguous() and x.shape[1] % 8 == 0
                and q.dtype == torch.int8 and q.is_contiguous() and scales.dtype == torch.bfloat16
                and scales.is_contiguous())

    def __call__(self, x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        out = torch.empty(rows, q.shape[0], dtype=torch.bfloat16)
        self.function(x.data_ptr(), q.data_ptr(), scales.data_ptr(), out.data_ptr(),
                      rows, q.shape[0], cols, torch.get_num_threads())
        return out


def same_as_torch(kernel: Int8Gemm) -> bool:
    generator = torch.Generator().manual_seed(4321)
    for out_features, cols, row_counts in PROBES:
        q = torch.randint(-127, 128, (out_features, cols), dtype=torch.int8, generator=generator)
        scales = torch.rand(out_features, generator=generator).bfloat16()
        for rows in row_counts:
            x = torch.randn(rows, cols, generator=generator).bfloat16()
            expected = torch.ops.aten._weight_int8pack_mm(x, q, scales)
            if not torch.equal(kernel(x, q, scales).view(torch.int16), expected.view(torch.int16)):
                return False
    return True


@functools.lru_cache(maxsize=None)
def int8_kernel() -> Optional[Int8Gemm]:
    """The compiled kernel where it matches torch bit for bit on this machine, else None."""
    flags = AVX512_FLAGS if cpu_has(("avx512f",)) else FLAGS  # the AVX-512 path: the same bits, twice the lanes
    return checked_kernel("int8_gemm.c", Int8Gemm, same_as_torch, flags)

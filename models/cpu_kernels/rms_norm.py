"""RMSNorm of bf16 rows in one call (``rms_norm.c``), where torch's takes eight tensor ops.

Unlike the matmul kernels this is kvgate's own arithmetic, not a copy of torch's: it rounds as
torch's F.rms_norm does (``(x * r) * w`` in fp32, rounded once) but sums the squares in another
order, so a value can differ from torch's in the last bit. Each row is computed on its own, so prefill, decode and any batch agree bit for bit,
and a runtime that uses it says so in its state fingerprint (:attr:`FINGERPRINT`), so that state
saved by the other arithmetic is never served. :func:`rms_norm_kernel` checks it against torch to
within a bf16 rounding before it is used.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Optional

import torch
import torch.nn.functional as F

from kvgate.models.cpu_kernels.build import checked_kernel

FINGERPRINT = "/rmsnorm-rows1"


class RmsNorm:
    def __init__(self, lib: ctypes.CDLL):
        self.function = lib.rms_norm
        self.function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_float, ctypes.c_int]
        self.function.restype = None

    def takes(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        return (x.dtype == torch.bfloat16 and x.is_contiguous() and x.shape[-1] % 8 == 0 and x.device.type == "cpu"
                and weight.dtype == torch.bfloat16 and weight.is_contiguous() and weight.shape == x.shape[-1:])

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        out = torch.empty_like(x)
        cols = x.shape[-1]
        self.function(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // cols, cols, eps,
                      torch.get_num_threads())
        return out


def close_to_torch(kernel: RmsNorm) -> bool:
    """Within one bf16 rounding step of torch's F.rms_norm on random rows (a sanity check of the build)."""
    generator = torch.Generator().manual_seed(7)
    x = (torch.randn(70, 576, generator=generator) * 4).bfloat16()
    weight = torch.randn(576, generator=generator).bfloat16()
    expected = F.rms_norm(x, weight.shape, weight, 1e-5).float()
    got = kernel(x, weight, 1e-5).float()
    return bool(((got - expected).abs() <= expected.abs() * 2 ** -7 + 1e-6).all())


@functools.lru_cache(maxsize=None)
def rms_norm_kernel() -> Optional[RmsNorm]:
    """The compiled kernel where it builds and agrees with torch to a rounding, else None."""
    return checked_kernel("rms_norm.c", RmsNorm, close_to_torch)

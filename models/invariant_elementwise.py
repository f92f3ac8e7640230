"""Elementwise functions whose every element rounds the same whatever the call holds.

torch 2.13's CPU kernels of silu, sigmoid, softplus, rsqrt run whole vector blocks and finish a
call's last few elements on another path that rounds differently, so an element's bits depend on how
many elements the call holds and where it sits. :func:`invariant` runs ``fn`` over the flattened
tensor padded to whole blocks: every element then takes the block path.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

BLOCK = 64  # elements: a multiple of every vector block measured (AVX-512 fp32, unrolled twice)


def invariant(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    count = x.numel()
    if count % BLOCK == 0 and x.is_contiguous():  # whole blocks already (a strided view takes another path)
        return fn(x)
    return fn(F.pad(x.reshape(-1), (0, -count % BLOCK)))[:count].view(x.shape)

"""Random valid GGUF weight blocks of the types :mod:`.kquant` reads, for its tests and bench:
every byte random except the fp16 scales, which are small finite numbers (random bytes would give
NaN, infinity or values that overflow a dot product)."""

from __future__ import annotations

import torch

from kvgate.models.cpu_kernels.kquant import TYPES

HALF_SCALE_OFFSETS = {"Q8_0": (0,), "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2),
                      "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_blocks(type_name: str, rows: int, cols: int, generator: torch.Generator,
                  scale: float = 0.01) -> torch.Tensor:
    """A ``rows`` x ``cols`` weight of ``type_name`` as raw blocks: uint8 [rows, row_bytes]."""
    _, weights, block_bytes = TYPES[type_name]
    raw = torch.randint(0, 256, (rows, cols // weights, block_bytes), dtype=torch.uint8, generator=generator)
    for offset in HALF_SCALE_OFFSETS[type_name]:
        halves = (torch.randn(rows, cols // weights, 1, generator=generator) * scale).half()
        raw[:, :, offset:offset + 2] = halves.view(torch.uint8)
    return raw.reshape(rows, -1).contiguous()

"""GGUF's 32-weight Q4_0 / Q4_1 / Q5_0 / Q5_1 blocks and their reference dequantization.

llama-quantize writes Q5_0 / Q5_1 where a 256-weight type does not fit a row (a 576-wide model's
Q4_K_M is mostly Q5_0). Every block is little-endian bytes, ``fp16`` an IEEE half; weight ``j`` of a
block takes the low nibble of nibble byte ``j`` for ``j < 16``, the high nibble of byte ``j - 16``
else; Q5 types add bit ``j`` of the uint32 ``qh`` as bit 4.

- **Q4_0**, 18 bytes: ``fp16 d``, 16 nibble bytes; ``w = d * (q - 8)``.
- **Q4_1**, 20 bytes: ``fp16 d``, ``fp16 m``, 16 nibble bytes; ``w = d * q + m``.
- **Q5_0**, 22 bytes: ``fp16 d``, 4 bytes ``qh``, 16 nibble bytes; ``w = d * (q - 16)``.
- **Q5_1**, 24 bytes: ``fp16 d``, ``fp16 m``, 4 bytes ``qh``, 16 nibble bytes; ``w = d * q + m``.

Each is computed in fp32 as gguf-py's ``dequantize`` does (the product rounded, then the sum).
"""

from __future__ import annotations

import torch

# type name -> (weights per block, bytes per block)
BLOCKS = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24)}


def _half(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The fp16 at byte ``start`` of every block, as fp32 [B, 1]."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """The 32 4-bit values [B, 32] of 16 nibble bytes [B, 16]: low nibbles first, then high ones."""
    return torch.cat([qs & 15, qs >> 4], -1)


def _high_bits(qh: torch.Tensor) -> torch.Tensor:
    """Bit ``j`` of each block's little-endian uint32 ``qh`` [B, 4 bytes], as uint8 [B, 32]."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((qh[:, :, None] >> shifts) & 1).reshape(-1, 32)


def q4_0(blocks: torch.Tensor) -> torch.Tensor:
    return _half(blocks, 0) * (_nibbles(blocks[:, 2:]).float() - 8)


def q4_1(blocks: torch.Tensor) -> torch.Tensor:
    return _half(blocks, 0) * _nibbles(blocks[:, 4:]).float() + _half(blocks, 2)


def q5_0(blocks: torch.Tensor) -> torch.Tensor:
    q = _nibbles(blocks[:, 6:]) | (_high_bits(blocks[:, 2:6]) << 4)
    return _half(blocks, 0) * (q.float() - 16)


def q5_1(blocks: torch.Tensor) -> torch.Tensor:
    q = _nibbles(blocks[:, 8:]) | (_high_bits(blocks[:, 4:8]) << 4)
    return _half(blocks, 0) * q.float() + _half(blocks, 2)


DEQUANTIZERS = {"Q4_0": q4_0, "Q4_1": q4_1, "Q5_0": q5_0, "Q5_1": q5_1}

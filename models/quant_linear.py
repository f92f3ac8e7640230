"""Linear weights held quantized: int4 in groups of 32 along K, or int8 with a scale per row.

:class:`Int4Weight` keeps torch's CPU int4pack layout (one byte holds rows ``j`` and ``j + 32`` of a
block of 64 rows, at one column; blocks are ``[K, 32]`` bytes) with bf16 ``(scale, zero)`` per
group, and a weight reads as ``(q - 8) * scale + zero``. :class:`Int8Weight` is ``q * scale``.
Both run torch's weight-only kernels, which are fast for few rows and only take bf16 activations;
from :data:`DENSE_ROWS` rows on, a dense matmul over the weight dequantized for that one call is
faster (see ``bench/bench_weights.py``), so large prefills cost about what bf16 costs. The kernels
are batch-invariant on their own; the switch to the dense matmul is not, so deterministic mode skips it.
:func:`linear` is ``F.linear`` for a plain tensor and the quantized path for these.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F

GROUP = 32
BLOCK_ROWS = 64  # rows of one int4pack block
DENSE_ROWS = 256  # from this many activation rows a call dequantizes and runs a dense matmul


class Int4Weight:
    def __init__(self, packed: torch.Tensor, scale_zeros: torch.Tensor, shape: tuple[int, int]):
        self.packed, self.scale_zeros, self.shape = packed, scale_zeros, torch.Size(shape)

    @classmethod
    def from_parts(cls, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> "Int4Weight":
        """From values 0..15 ``q`` [N, K] and fp32 ``scale``/``zero`` [N, K / 32] (``(q - 8) * scale + zero``)."""
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(), 1)
        scale_zeros = torch.stack([scale.t(), zero.t()], -1).to(torch.bfloat16).contiguous()
        return cls(packed, scale_zeros, tuple(q.shape))

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> "Int4Weight":
        """Asymmetric min/max quantization of each group of 32 weights along K."""
        rows, cols = weight.shape
        groups = weight.float().view(rows, cols // GROUP, GROUP)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp_min(1e-8).bfloat16().float()  # the kernel reads bf16 scales
        zero = (low + 8 * scale).bfloat16().float()
        q = torch.round((groups - (zero - 8 * scale)[..., None]) / scale[..., None]).clamp(0, 15)
        return cls.from_parts(q.view(rows, cols), scale, zero)

    @staticmethod
    def fits(shape: torch.Size) -> bool:
        return len(shape) == 2 and shape[0] % BLOCK_ROWS == 0 and shape[1] % GROUP == 0

    def dequantize(self) -> torch.Tensor:
        rows, cols = self.shape
        blocks = self.packed.view(rows // BLOCK_ROWS, cols, BLOCK_ROWS // 2)
        q = torch.empty(rows // BLOCK_ROWS, 2, BLOCK_ROWS // 2, cols)  # fp32, written as the nibbles unpack
        q[:, 0] = (blocks & 15).transpose(1, 2)
        q[:, 1] = blocks.bitwise_right_shift(4).transpose(1, 2)
        scale, zero = self.scale_zeros.float().permute(2, 1, 0)[..., None]
        q = q.view(rows, cols // GROUP, GROUP)
        return q.mul_(scale).add_(zero - 8 * scale).view(rows, cols).bfloat16()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.scale_zeros)

    def tensors(self) -> list[torch.Tensor]:
        return [self.packed, self.scale_zeros]


class Int8Weight:
    def __init__(self, q: torch.Tensor, scales: torch.Tensor):
        self.q, self.scales, self.shape = q, scales, q.shape

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> "Int8Weight":
        """Symmetric quantization with one scale per row (absmax / 127)."""
        scales = (weight.float().abs().amax(-1) / 127).clamp_min(1e-8).bfloat16()
        q = torch.round(weight.float() / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scales)

    @staticmethod
    def fits(shape: torch.Size) -> bool:
        return len(shape) == 2

    def dequantize(self) -> torch.Tensor:
        return self.q.to(torch.bfloat16) * self.scales[:, None]

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.q, self.scales)

    def tensors(self) -> list[torch.Tensor]:
        return [self.q, self.scales]


QuantizedWeight = Union[Int4Weight, Int8Weight]
FORMATS = {"int4": Int4Weight, "int8": Int8Weight}


def quantize(weight: torch.Tensor, fmt: str) -> Union[torch.Tensor, QuantizedWeight]:
    """``weight`` in format ``fmt`` ("bf16": unchanged); a shape the format cannot hold stays dense."""
    kind = FORMATS.get(fmt)
    if kind is None or not kind.fits(weight.shape):
        return weight
    return kind.quantize(weight)


def linear(x: torch.Tensor, weight: Union[torch.Tensor, QuantizedWeight], bias: Optional[torch.Tensor] = None,
           dense_rows: Optional[int] = DENSE_ROWS) -> torch.Tensor:
    """``x @ weight.T + bias``; ``dense_rows`` None: always the quantized kernel, whose every output row
    is the same whatever the number of rows (batch-invariant, as ``[engine] deterministic`` needs)."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1])
    if dense_rows is not None and rows.shape[0] >= dense_rows:
        out = F.linear(rows, weight.dequantize(), bias)
    else:
        out = weight.matmul(rows.contiguous())
        if bias is not None:
            out = out + bias
    return out.view(*x.shape[:-1], weight.shape[0])

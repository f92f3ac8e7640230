"""Linear weights held quantized: int4 in groups of 32 along K, or int8 with a scale per row.

:class:`Int4Weight` keeps torch's CPU int4pack layout (the kernel's own, which differs between CPUs:
:func:`nibble_order` reads it off the packer) with bf16 ``(scale, zero)`` per group, and a
weight reads as ``(q - 8) * scale + zero``. :class:`Int8Weight` is ``q * scale``.
Both run torch's weight-only kernels, which are fast for few rows and only take bf16 activations
(:mod:`kvgate.models.cpu_kernels` runs instead where it computes the same bits, faster);
from :data:`DENSE_ROWS` rows on, a dense matmul over the weight dequantized for that one call is
faster (see ``bench/bench_weights.py``), so large prefills cost about what bf16 costs. The kernels
are batch-invariant on their own; the switch to the dense matmul is not, so deterministic mode skips it.
:func:`linear` is ``F.linear`` for a plain tensor and the quantized path for these and for GGUF K-quant
weights (:mod:`kvgate.models.gguf_kquant_weight`).
"""

from __future__ import annotations

import functools
from typing import Optional, Union

import torch
import torch.nn.functional as F

from kvgate.models.cpu_kernels.int4 import int4_kernel
from kvgate.models.cpu_kernels.int8 import int8_kernel
from kvgate.models.gguf_kquant_weight import KQuantWeight, StackedRows

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
        order = nibble_order(rows, cols)
        if order is None:  # a layout the probes cannot read: the kernel itself, on an identity
            return self.matmul(torch.eye(cols, dtype=torch.bfloat16)).t().contiguous()
        q = _nibbles(self.packed)[order]
        scale, zero = self.scale_zeros.float().permute(2, 1, 0)[..., None]
        q = q.view(rows, cols // GROUP, GROUP).float()
        return q.mul_(scale).add_(zero - 8 * scale).view(rows, cols).bfloat16()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        kernel = int4_kernel() if x.device.type == "cpu" else None
        if kernel is not None and kernel.takes(x, self.packed, self.scale_zeros, self.shape[0]):
            return kernel(x, self.packed, self.scale_zeros, self.shape[0])
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self.scale_zeros)

    def tensors(self) -> list[torch.Tensor]:
        return [self.packed, self.scale_zeros]


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Every nibble of a packed weight: the low ones of all its bytes, then the high ones."""
    data = packed.contiguous().view(torch.uint8).reshape(-1)
    return torch.cat([data & 15, data >> 4])


@functools.lru_cache(maxsize=None)
def nibble_order(rows: int, cols: int) -> Optional[torch.Tensor]:
    """For each value of a [rows, cols] int4 weight (row-major), the position of the nibble that holds
    it once packed (in :func:`_nibbles`' order), or None when packing is not a plain rearrangement.

    The int4pack layout is the CPU kernel's own and differs between CPUs (AVX-512 and AVX2 builds
    place rows differently), so it is read off the packer: probe ``d`` packs hex digit ``d`` of every
    value's index, and the packed nibbles spell out, digit by digit, where each one came from."""
    count = rows * cols
    index = torch.arange(count, dtype=torch.int64)
    sources = torch.zeros(count, dtype=torch.int64)
    for digit in range(max(1, -(-(count - 1).bit_length() // 4))):
        probe = ((index >> (4 * digit)) & 15).view(rows, cols).to(torch.int32)
        sources |= _nibbles(torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 1)).to(torch.int64) << (4 * digit)
    if not torch.equal(sources.sort().values, index):
        return None
    order = torch.empty(count, dtype=torch.int32)  # cached per shape for the process: 4 bytes a weight
    order[sources] = index.to(torch.int32)
    check = torch.randint(0, 16, (rows, cols), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    unpacked = _nibbles(torch.ops.aten._convert_weight_to_int4pack_for_cpu(check, 1))[order]
    return order if torch.equal(unpacked.view(rows, cols).to(torch.int32), check) else None


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
        kernel = int8_kernel() if x.device.type == "cpu" else None
        if kernel is not None and kernel.takes(x, self.q, self.scales):
            return kernel(x, self.q, self.scales)
        return torch.ops.aten._weight_int8pack_mm(x, self.q, self.scales)

    def tensors(self) -> list[torch.Tensor]:
        return [self.q, self.scales]


QuantizedWeight = Union[Int4Weight, Int8Weight, KQuantWeight, StackedRows]
TILED_WEIGHTS = (KQuantWeight, StackedRows)  # dequantize in tiles inside matmul: never the dense path
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
    if dense_rows is not None and rows.shape[0] >= dense_rows and not isinstance(weight, TILED_WEIGHTS):
        out = F.linear(rows, weight.dequantize(), bias)
    else:
        out = weight.matmul(rows.contiguous())
        if bias is not None:
            out = out + bias
    return out.view(*x.shape[:-1], weight.shape[0])

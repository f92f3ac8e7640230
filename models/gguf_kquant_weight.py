"""Linear weights held as GGUF Q8_0 / Q4_K / Q5_K / Q6_K blocks (:mod:`kvgate.models.gguf_kquant`).

:class:`KQuantWeight` keeps a tensor's raw rows (uint8 [N, row bytes]) as the file holds them. Its
``matmul`` runs the native kernel of :mod:`kvgate.models.cpu_kernels.kquant` where that takes the
call, else the torch fallback: the weight's rows are dequantized :data:`WEIGHT_TILE` at a time to fp32
(ggml's exact values; no whole dense copy is kept) and multiplied by the activations in calls of
exactly :data:`~kvgate.models.invariant_linear.TILE_ROWS` rows, the last padded with zeros. Every
call of the fallback therefore runs the same fp32 products on the same shapes for a given output
row, whatever the other rows of the batch are: it is batch- and split-invariant on every path,
deterministic mode or not. :class:`StackedRows` is a fused weight (q/k/v, gate/up) whose parts
came in different types: its output is its parts' outputs side by side.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from kvgate.models.cpu_kernels.kquant import kquant_kernel
from kvgate.models.gguf_kquant import dequantize_rows, row_weights
from kvgate.models.invariant_linear import TILE_ROWS

WEIGHT_TILE = 256  # weight rows dequantized at a time by the fallback (fp32: 1 KiB a weight column)


@functools.lru_cache(maxsize=None)
def kernel_arithmetic() -> str:
    """The arithmetic K-quant matmuls run with here: the native kernel's fingerprint (its arithmetic's
    name and version, and the variant: ``/kquant1-avx512``), or "torch" for the fallback."""
    kernel = kquant_kernel()
    return "torch" if kernel is None else kernel.fingerprint


class KQuantWeight:
    """Raw GGUF blocks [rows, row_bytes] of one type; or, once :meth:`native_blocks` has handed them
    to the native layer, only its repacked copy (``raw`` None): rows are read back from that, with the
    same bits, and a matmul here (not the native layer's) takes :meth:`torch_matmul`'s path."""

    def __init__(self, raw: torch.Tensor, type_name: str):
        self.raw: Optional[torch.Tensor] = raw.contiguous()
        self.type_name = type_name
        self.packed: Optional[torch.Tensor] = None
        self.read_packed: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None
        self.shape = torch.Size([raw.shape[0], row_weights(type_name, raw.shape[1])])

    def native_blocks(self, repack: Callable[[torch.Tensor], torch.Tensor],
                      read_rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The blocks as ``repack(raw)`` lays them out, made the first time; the raw blocks are
        dropped then, so the weights are held once, and :meth:`rows` reads ``read_rows(packed, ids)``."""
        if self.packed is None:
            self.packed, self.read_packed, self.raw = repack(self.raw), read_rows, None
        return self.packed

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 [len(ids), K]: rows ``ids`` (int64, 1-D) dequantized as ggml does it."""
        if self.raw is None:
            return self.read_packed(self.packed, ids)
        return dequantize_rows(self.raw[ids], self.type_name)

    def to(self, device: Any = None, dtype: Any = None) -> "KQuantWeight":
        """Itself: the blocks stay as the file holds them (CPU only)."""
        return self

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return self.rows(torch.arange(self.shape[0])).to(dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T`` for x [M, K], in x's dtype."""
        kernel = kquant_kernel() if x.device.type == "cpu" and self.raw is not None else None
        if kernel is not None and kernel.takes(x, self.type_name):
            return kernel.matmul(x.contiguous(), self.raw, self.type_name, self.shape[0]).to(x.dtype)
        return self.torch_matmul(x).to(x.dtype)

    def torch_matmul(self, x: torch.Tensor) -> torch.Tensor:
        """The fallback's fp32 ``x @ W.T``: weight tiles of :data:`WEIGHT_TILE` rows times row tiles
        of exactly ``TILE_ROWS`` activations, so no output row depends on the call's other rows."""
        rows = x.shape[0]
        tiles = F.pad(x.float(), (0, 0, 0, -rows % TILE_ROWS)).split(TILE_ROWS)
        out = torch.empty(len(tiles) * TILE_ROWS, self.shape[0], dtype=torch.float32)
        for start in range(0, self.shape[0], WEIGHT_TILE):
            weight = self.rows(torch.arange(start, min(start + WEIGHT_TILE, self.shape[0])))
            for index, tile in enumerate(tiles):
                out[index * TILE_ROWS:(index + 1) * TILE_ROWS, start:start + weight.shape[0]] = F.linear(tile, weight)
        return out[:rows]

    def tensors(self) -> list[torch.Tensor]:
        return [self.raw if self.raw is not None else self.packed]


class StackedRows:
    """Weights stacked along their rows, each held its own way (a fused weight of mixed GGUF types)."""

    def __init__(self, parts: list[KQuantWeight]):
        self.parts = parts
        self.shape = torch.Size([sum(part.shape[0] for part in parts), parts[0].shape[1]])

    def to(self, device: Any = None, dtype: Any = None) -> "StackedRows":
        return self

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.cat([part.dequantize(dtype) for part in self.parts])

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([part.matmul(x) for part in self.parts], -1)

    def tensors(self) -> list[torch.Tensor]:
        return [tensor for part in self.parts for tensor in part.tensors()]


def kquant_cat_rows(parts: list) -> Optional[Any]:
    """``parts`` stacked along their rows when all are K-quant weights (one :class:`KQuantWeight`
    when they share a type; else a :class:`StackedRows` of each run of one type), else None."""
    if not all(isinstance(part, KQuantWeight) for part in parts):
        return None
    runs: list[list[KQuantWeight]] = []
    for part in parts:
        if runs and runs[-1][0].type_name == part.type_name:
            runs[-1].append(part)
        else:
            runs.append([part])
    merged = [KQuantWeight(torch.cat([part.raw for part in run]), run[0].type_name) for run in runs]
    return merged[0] if len(merged) == 1 else StackedRows(merged)

"""GGUF Q4_0 / Q4_1 tensors kept 4-bit: their nibbles, scales and zeros, as int4 weights take them.

A Q4_1 block is 32 weights ``w = d * q + m`` (fp16 ``d`` and ``m``, then 16 bytes: byte ``j``
holds weight ``j`` in its low nibble and ``j + 16`` in its high one); Q4_0 has no ``m`` and reads
``w = d * (q - 8)``. Both are the same weights as :class:`~kvgate.models.quant_linear.Int4Weight`'s
``(q - 8) * scale + zero`` with ``scale = d`` and ``zero = m + 8 d`` (Q4_1) or ``zero = 0`` (Q4_0).

In a converted directory a tensor ``X`` kept this way is three tensors: ``X.q4`` (uint8 [N, K / 2],
column ``2i`` in the low nibble of byte ``i``, ``2i + 1`` in the high one), ``X.q4_scale`` and
``X.q4_zero`` (fp32 [N, K / 32]). :func:`gather_parts` turns them back into one :class:`Int4Parts`.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs
import numpy as np
import torch

from kvgate.models.gguf_kquant_weight import KQuantWeight, kquant_cat_rows
from kvgate.models.quant_linear import Int4Weight

SUFFIXES = (".q4", ".q4_scale", ".q4_zero")


def q4_parts(data: np.ndarray, type_name: str) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(q uint8 [N, K], scale, zero fp32 [N, K / 32])`` of a Q4_0 / Q4_1 tensor's raw rows, else None."""
    if type_name not in ("Q4_0", "Q4_1"):
        return None
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, 18 if type_name == "Q4_0" else 20)
    scale = blocks[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    if type_name == "Q4_1":
        zero = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32) + 8 * scale
    else:
        zero = np.zeros_like(scale)
    packed = blocks[..., -16:]
    q = np.concatenate([packed & 15, packed >> 4], -1).reshape(rows, -1)
    return q, scale, zero


def stored_parts(name: str, parts: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, torch.Tensor]:
    """The three converted-directory tensors of ``name``."""
    q, scale, zero = (np.ascontiguousarray(part) for part in parts)
    nibbles = q[:, 0::2] | (q[:, 1::2] << 4)
    return {name + ".q4": torch.from_numpy(np.ascontiguousarray(nibbles)),
            name + ".q4_scale": torch.from_numpy(scale.copy()), name + ".q4_zero": torch.from_numpy(zero.copy())}


@attrs.frozen
class Int4Parts:
    """One linear weight's nibbles (uint8 [N, K / 2]), scales and zeros, before packing."""

    nibbles: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self.nibbles.shape[0], 2 * self.nibbles.shape[1]])

    def to(self, device: Any = None, dtype: Any = None) -> "Int4Parts":
        """Itself: the parts stay as stored until :meth:`weight` packs them (CPU only)."""
        return self

    def contiguous(self) -> "Int4Parts":
        """Itself, as :meth:`to`: a loader may treat the parts as a tensor until they are packed."""
        return self

    def weight(self) -> Int4Weight:
        q = torch.stack([self.nibbles & 15, self.nibbles >> 4], -1).view(self.shape)
        return Int4Weight.from_parts(q, self.scale, self.zero)


def gather_parts(tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``tensors`` with every ``X.q4`` / ``X.q4_scale`` / ``X.q4_zero`` triple replaced by ``X``: an :class:`Int4Parts`."""
    out: dict[str, Any] = {}
    for name, tensor in tensors.items():
        if name.endswith(".q4"):
            base = name.removesuffix(".q4")
            out[base] = Int4Parts(tensor, tensors[base + ".q4_scale"], tensors[base + ".q4_zero"])
        elif not name.endswith(SUFFIXES):
            out[name] = tensor
    return out


def cat_rows(parts: list) -> Any:
    """Weights stacked along their rows (output features): tensors, or :class:`Int4Parts` alike, or
    K-quant weights (:func:`~kvgate.models.gguf_kquant_weight.kquant_cat_rows`)."""
    kquant = kquant_cat_rows(parts)
    if kquant is not None:
        return kquant
    if all(isinstance(part, Int4Parts) for part in parts):
        return Int4Parts(*(torch.cat([getattr(p, field) for p in parts]) for field in ("nibbles", "scale", "zero")))
    dtype = next(part.dtype for part in parts if isinstance(part, torch.Tensor))
    # a fused weight whose parts came in different GGUF types is dense
    return torch.cat([p.weight().dequantize().to(dtype) if isinstance(p, Int4Parts) else
                      p.dequantize(dtype) if isinstance(p, KQuantWeight) else p for p in parts])

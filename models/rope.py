"""Rotary position embeddings (split-half convention, as in Hugging Face Llama) with scaling.

Supported ``rope_scaling`` types: none/default, ``linear`` and ``llama3``. The cos/sin table grows
on demand, so positions past the trained context work (context extension).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch


def inverse_frequencies(head_dim: int, theta: float, scaling: Optional[dict[str, Any]]) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    raise ValueError(f"unsupported rope scaling type {kind!r} (supported: default, linear, llama3)")


def _llama3_frequencies(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    factor = float(scaling["factor"])
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    original = float(scaling["original_max_position_embeddings"])
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


class Rotary:
    """cos/sin tables indexed by position; ``apply`` rotates q or k of shape [..., n, heads, dim]."""

    def __init__(self, head_dim: int, theta: float, scaling: Optional[dict[str, Any]],
                 dtype: torch.dtype, device: torch.device, initial_positions: int = 4096):
        self.inv_freq = inverse_frequencies(head_dim, theta, scaling)
        self.dtype, self.device = dtype, device
        self.cos = self.sin = torch.empty(0)
        self._build(initial_positions)

    def _build(self, positions: int) -> None:
        steps = torch.arange(positions, dtype=torch.float32)
        freqs = torch.outer(steps, self.inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        self.cos = angles.cos().to(self.dtype).to(self.device)
        # the sign of rotate_half is folded into the table: [-sin, +sin]
        sin = angles.sin()
        half = sin.shape[-1] // 2
        self.sin = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1).to(self.dtype).to(self.device)

    def ensure(self, positions: int) -> None:
        if positions > self.cos.shape[0]:
            self._build(max(positions, 2 * self.cos.shape[0]))

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin for ``positions``, shaped [n, 1, dim] to broadcast over heads."""
        return self.cos[positions].unsqueeze(-2), self.sin[positions].unsqueeze(-2)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` with rotate_half's sign already in ``signed_sin``."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * signed_sin

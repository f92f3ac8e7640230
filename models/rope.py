"""Rotary position embeddings (split-half convention, as in Hugging Face Llama) with scaling.

Frequency types: none/default, ``linear``, ``llama3`` and ``yarn`` (a ``dynamic`` checkpoint is
resolved to a plain base for its served context first, see :mod:`kvgate.models.rope_scaling`).
YaRN's attention factor multiplies both tables, as Hugging Face does. The cos/sin table grows on
demand, so positions past the trained context work (context extension).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

SUPPORTED = ("default", "linear", "llama3", "yarn")


def scaling_type(scaling: Optional[dict[str, Any]]) -> str:
    """The ``rope_type`` (or legacy ``type``) of a scaling dict; ``default`` for none."""
    return (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"


def base_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rope_frequencies(head_dim: int, theta: float, scaling: Optional[dict[str, Any]]) -> tuple[torch.Tensor, float]:
    """(inverse frequencies, attention factor) of one rope configuration."""
    inv_freq = base_frequencies(head_dim, theta)
    kind = scaling_type(scaling)
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / float(scaling["factor"]), 1.0
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, scaling), 1.0
    if kind == "yarn":
        return _yarn_frequencies(inv_freq, head_dim, theta, scaling)
    raise ValueError(f"unsupported rope scaling type {kind!r} (supported: {', '.join(SUPPORTED)}, dynamic)")


def inverse_frequencies(head_dim: int, theta: float, scaling: Optional[dict[str, Any]]) -> torch.Tensor:
    return rope_frequencies(head_dim, theta, scaling)[0]


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


def yarn_attention_factor(scaling: dict[str, Any]) -> float:
    """YaRN's cos/sin multiplier: given, else 0.1 ln(factor) + 1 (DeepSeek: a ratio of two such)."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])

    def mscale(weight: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0

    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(float(scaling["mscale"])) / mscale(float(scaling["mscale_all_dim"]))
    return mscale(1.0)


def _yarn_frequencies(inv_freq: torch.Tensor, head_dim: int, theta: float,
                      scaling: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """Dimensions that turn fewer than ``beta_slow`` times over the original context are
    interpolated (divided by ``factor``), those turning more than ``beta_fast`` times are kept,
    with a linear ramp between the two."""
    factor = float(scaling["factor"])
    original = float(scaling["original_max_position_embeddings"])
    fast, slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

    def dimension_of(turns: float) -> float:  # the dimension index that turns ``turns`` times
        return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension_of(fast), dimension_of(slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    kept = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate
    blended = (inv_freq / factor) * (1 - kept) + inv_freq * kept
    return blended, yarn_attention_factor(scaling)


class Rotary:
    """cos/sin tables indexed by position; ``apply`` rotates q or k of shape [..., n, heads, dim]."""

    def __init__(self, head_dim: int, theta: float, scaling: Optional[dict[str, Any]],
                 dtype: torch.dtype, device: torch.device, initial_positions: int = 4096):
        self.inv_freq, self.attention_factor = rope_frequencies(head_dim, theta, scaling)
        self.dtype, self.device = dtype, device
        self.cos = self.sin = torch.empty(0)
        self._build(initial_positions)

    def _build(self, positions: int) -> None:
        cos, sin = rope_tables(self.inv_freq, self.attention_factor, positions)
        self.cos, self.sin = cos.to(self.dtype).to(self.device), sin.to(self.dtype).to(self.device)

    def ensure(self, positions: int) -> None:
        if positions > self.cos.shape[0]:
            self._build(max(positions, 2 * self.cos.shape[0]))

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin for ``positions``, shaped [n, 1, dim] to broadcast over heads."""
        return self.cos[positions].unsqueeze(-2), self.sin[positions].unsqueeze(-2)


def rope_tables(inv_freq: torch.Tensor, attention_factor: float, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 cos and signed sin [positions, 2 * len(inv_freq)] of positions [0, positions): the sign of
    rotate_half is folded into the sin table, [-sin, +sin]."""
    freqs = torch.outer(torch.arange(positions, dtype=torch.float32), inv_freq.float())
    angles = torch.cat([freqs, freqs], dim=-1)
    sin = angles.sin() * attention_factor
    half = sin.shape[-1] // 2
    return angles.cos() * attention_factor, torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` with rotate_half's sign already in ``signed_sin``."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * signed_sin

"""DeepSeek V4's rope: the *last* ``rope_dim`` dims of a vector rotate in interleaved pairs
``(x[2i], x[2i+1])`` by ``position * inv_freq[i]``; the angles are computed in fp32, the rotation
runs in fp32 with cos/sin rounded to the vector's dtype first (as transformers does). Sliding-only
layers use plain rope (``rope_theta``), compressed layers, their compressors and the indexer the
compressed rope (``compress_rope_theta``, YaRN frequencies when scaled, cos/sin unscaled).
An attention output is rotated back by the query's position (the negated angle)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from kvgate.models.invariant_elementwise import invariant
from kvgate.models.rope import rope_frequencies


class InterleavedRotary:
    def __init__(self, rope_dim: int, theta: float, scaling: Optional[dict[str, Any]], device: torch.device):
        inv_freq, _ = rope_frequencies(rope_dim, theta, scaling)
        self.inv_freq = inv_freq.to(torch.float32).to(device)

    def angles(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [n, rope_dim / 2] (fp32) of positions [n], each the same bits in any call."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq
        return invariant(torch.cos, freqs), invariant(torch.sin, freqs)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` [n, ..., dim] with its last ``2 * cos.shape[-1]`` dims rotated by the angles of row n."""
    half = cos.shape[-1]
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (half,)
    c, s = cos.to(x.dtype).float().view(shape), sin.to(x.dtype).float().view(shape)
    pairs = x[..., -2 * half:].float().unflatten(-1, (half, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([even * c - odd * s, odd * c + even * s], -1).flatten(-2).to(x.dtype)
    return torch.cat([x[..., :-2 * half], rotated], -1)

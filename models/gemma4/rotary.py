"""Gemma 4's rotary tables, one per layer type (sliding and full layers differ in theta and width).

transformers' ``proportional`` rope turns the first ``partial_rotary_factor`` of each head's frequency
pairs, their frequencies counted over the whole head width, and leaves the rest still (frequency 0:
cos 1, sin 0); with a factor of 1 it is the default rope.
"""

from __future__ import annotations

import torch

from kvgate.models.gemma4.arch import Gemma4Arch, Rope
from kvgate.models.rope import Rotary


class ProportionalRotary(Rotary):
    def __init__(self, head_dim: int, rope: Rope, dtype: torch.dtype, device: torch.device,
                 initial_positions: int = 4096):
        pairs = int(rope.partial * head_dim // 2)
        turning = 1.0 / (rope.theta ** (torch.arange(0, 2 * pairs, 2, dtype=torch.int64).float() / head_dim))
        self.inv_freq = torch.cat([turning, torch.zeros(head_dim // 2 - pairs)]) / rope.factor
        self.attention_factor = 1.0
        self.dtype, self.device = dtype, device
        self.cos = self.sin = torch.empty(0)
        self._build(initial_positions)


class Rotaries:
    """A :class:`ProportionalRotary` per layer type, grown together."""

    def __init__(self, arch: Gemma4Arch, dtype: torch.dtype, device: torch.device, initial_positions: int):
        if arch.rope_scaling is not None:
            raise ValueError(f"Gemma 4 is served up to its max_position_embeddings ({arch.trained_context}): "
                             "model.context_extension does not apply to its rope; set model.max_context")
        self.by_type = {kind: ProportionalRotary(arch.head_dims[arch.layer_types.index(kind)], rope, dtype, device,
                                                 initial_positions)
                        for kind, rope in arch.rope.items()}

    def ensure(self, positions: int) -> None:
        for rotary in self.by_type.values():
            rotary.ensure(positions)

    def tables(self, kind: str, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.by_type[kind].tables(positions)

"""The tensors of one MoE layer, read from Hugging Face names (experts one by one, or stacked)."""

from __future__ import annotations

from typing import Callable, Optional

import attrs
import torch

from kvgate.models.moe.config import MoeConfig

Take = Callable[[str], torch.Tensor]


@attrs.define
class MoeWeights:
    """``router`` [experts, hidden] (fp32), ``correction_bias`` [experts] (fp32, sigmoid routers),
    ``gate_up`` [experts, 2 * width, hidden], ``down`` [experts, hidden, width], and the shared
    experts' fused ``shared_gate_up`` / ``shared_down`` when the model has them."""

    router: torch.Tensor
    correction_bias: Optional[torch.Tensor]
    gate_up: torch.Tensor
    down: torch.Tensor
    shared_gate_up: Optional[torch.Tensor] = None
    shared_down: Optional[torch.Tensor] = None

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in attrs.astuple(self, recurse=False) if t is not None]

    def check_shapes(self, config: MoeConfig, hidden: int) -> None:
        e, w = config.experts, config.intermediate_size
        expected = {"router": (e, hidden), "gate_up": (e, 2 * w, hidden), "down": (e, hidden, w)}
        if config.shared_intermediate_size:
            s = config.shared_intermediate_size
            expected.update(shared_gate_up=(2 * s, hidden), shared_down=(hidden, s))
        for name, shape in expected.items():
            actual = getattr(self, name)
            if actual is None or tuple(actual.shape) != shape:
                found = None if actual is None else tuple(actual.shape)
                raise ValueError(f"MoE weight {name} has shape {found}, config says {shape}")


def read_moe(take: Take, has: Callable[[str], bool], prefix: str, config: MoeConfig) -> MoeWeights:
    """The MoE of the layer whose MLP tensors start with ``prefix`` (e.g. ``model.layers.3.mlp.``).

    Experts are ``experts.<e>.{gate,up,down}_proj.weight`` or stacked ``experts.gate_up_proj`` /
    ``experts.down_proj``; shared experts ``shared_experts.*`` (DeepSeek, GLM) or ``shared_expert.*``.
    """
    router = take(prefix + "gate.weight").float()
    bias_name = prefix + "gate.e_score_correction_bias"
    bias = take(bias_name).float() if config.scoring == "sigmoid" and has(bias_name) else None
    if has(prefix + "experts.gate_up_proj"):
        gate_up, down = take(prefix + "experts.gate_up_proj"), take(prefix + "experts.down_proj")
    else:
        experts = [f"{prefix}experts.{e}." for e in range(config.experts)]
        gate_up = torch.stack([torch.cat([take(e + "gate_proj.weight"), take(e + "up_proj.weight")])
                               for e in experts])
        down = torch.stack([take(e + "down_proj.weight") for e in experts])
    weights = MoeWeights(router=router, correction_bias=bias, gate_up=gate_up, down=down)
    if config.shared_intermediate_size:
        shared = next((prefix + n for n in ("shared_experts.", "shared_expert.")
                       if has(prefix + n + "gate_proj.weight")), prefix + "shared_experts.")
        weights.shared_gate_up = torch.cat([take(shared + "gate_proj.weight"), take(shared + "up_proj.weight")])
        weights.shared_down = take(shared + "down_proj.weight")
    return weights

"""gpt-oss's mixture of experts: a router with a bias, softmax over each token's top-k logits,
and experts with biases and a clamped SwiGLU, run through the shared grouped experts
(:func:`kvgate.models.moe.experts.routed_experts`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.gpt_oss.arch import GptOssArch
from kvgate.models.gpt_oss.weights import GptOssLayer
from kvgate.models.invariant_elementwise import invariant
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.moe.experts import routed_experts
from kvgate.models.moe.routing import route


def experts_mlp(x: torch.Tensor, arch: GptOssArch, layer: GptOssLayer, deterministic: bool = False) -> torch.Tensor:
    """The MoE MLP of normed hidden states ``x`` [n, hidden] (the residual is the caller's).
    ``deterministic``: each row rounds as it would in any other call (as the shared MoE's mode)."""
    linear = invariant_linear if deterministic else F.linear
    weights, experts = route(linear(x.float(), layer.router, layer.router_bias), arch.moe, None, deterministic)

    def expert_mlp(rows: torch.Tensor, expert: int) -> torch.Tensor:
        gate, up = linear(rows, layer.gate_up[expert], layer.gate_up_bias[expert]).chunk(2, -1)
        return linear(clamped_swiglu(gate, up, arch.swiglu_alpha, arch.swiglu_limit, deterministic),
                      layer.down[expert], layer.down_bias[expert])

    return routed_experts(x, weights, experts, layer.gate_up, layer.down, expert_mlp, deterministic)


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, alpha: float, limit: float,
                   deterministic: bool = False) -> torch.Tensor:
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    gain = invariant(torch.sigmoid, gate * alpha) if deterministic else torch.sigmoid(gate * alpha)
    return (up + 1) * (gate * gain)

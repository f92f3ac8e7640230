"""The MoE MLP: routed experts run once each over the tokens routed to them, plus shared experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.moe.config import MoeConfig
from kvgate.models.moe.routing import route
from kvgate.models.moe.weights import MoeWeights


def moe_mlp(x: torch.Tensor, config: MoeConfig, weights: MoeWeights) -> torch.Tensor:
    """The MoE MLP of normed hidden states ``x`` [n, hidden] (the residual is the caller's)."""
    logits = F.linear(x.float(), weights.router)
    routing, experts = route(logits, config, weights.correction_bias)
    out = routed_experts(x, routing, experts, weights.gate_up, weights.down)
    if weights.shared_gate_up is not None:
        out = out + swiglu(x, weights.shared_gate_up, weights.shared_down)
    return out


def swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """A SiLU-gated MLP with fused ``gate_up`` [2 * width, hidden] and ``down`` [hidden, width]."""
    gate, up = F.linear(x, gate_up).chunk(2, -1)
    return F.linear(F.silu(gate) * up, down)


def routed_experts(x: torch.Tensor, routing: torch.Tensor, experts: torch.Tensor,
                   gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """Sum over each token's experts of weight * expert(token).

    The (token, expert) pairs are sorted by expert, so every chosen expert runs once over all its
    tokens, as one matrix product; one host sync per call reads how many tokens each expert got.
    """
    top_k = experts.shape[1]
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)
    tokens = order // top_k
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()
    rows = x.index_select(0, tokens)
    scale = routing.reshape(-1).index_select(0, order).to(x.dtype)[:, None]
    results = torch.empty_like(rows)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            end = start + count
            results[start:end] = swiglu(rows[start:end], gate_up[expert], down[expert])
            start = end
    return torch.zeros_like(x).index_add_(0, tokens, results * scale)

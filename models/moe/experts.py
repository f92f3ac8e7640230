"""The MoE MLP: routed experts run once each over the tokens routed to them, plus shared experts."""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from kvgate.models.invariant_elementwise import invariant
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.moe.config import MoeConfig
from kvgate.models.moe.routing import route
from kvgate.models.moe.weights import MoeWeights


def moe_mlp(x: torch.Tensor, config: MoeConfig, weights: MoeWeights, deterministic: bool = False) -> torch.Tensor:
    """The MoE MLP of normed hidden states ``x`` [n, hidden] (the residual is the caller's).

    ``deterministic``: every product and activation rounds each row as it would alone
    (:mod:`kvgate.models.invariant_linear`, :mod:`kvgate.models.invariant_elementwise`), so an expert
    gives a token the same bits however many tokens a batch or a prefill split routes to it; each
    token's expert outputs are summed in expert order whatever else the call holds.
    """
    linear = invariant_linear if deterministic else F.linear
    routing, experts = route(linear(x.float(), weights.router), config, weights.correction_bias, deterministic)
    out = routed_experts(x, routing, experts, weights.gate_up, weights.down, deterministic=deterministic)
    if weights.shared_gate_up is not None:
        out = out + swiglu(x, weights.shared_gate_up, weights.shared_down, deterministic)
    return out


def swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
    """A SiLU-gated MLP with fused ``gate_up`` [2 * width, hidden] and ``down`` [hidden, width]."""
    if not deterministic:
        gate, up = F.linear(x, gate_up).chunk(2, -1)
        return F.linear(F.silu(gate) * up, down)
    gate, up = invariant_linear(x, gate_up).chunk(2, -1)
    return invariant_linear(invariant(F.silu, gate) * up, down)


def routed_experts(x: torch.Tensor, routing: torch.Tensor, experts: torch.Tensor,
                   gate_up: torch.Tensor, down: torch.Tensor,
                   expert_mlp: Optional[Callable[[torch.Tensor, int], torch.Tensor]] = None,
                   deterministic: bool = False) -> torch.Tensor:
    """Sum over each token's experts of weight * expert(token).

    The (token, expert) pairs are sorted by expert, so every chosen expert runs once over all its
    tokens, as one matrix product; one host sync per call reads how many tokens each expert got.
    ``expert_mlp(rows, expert)``: a family's own expert (gpt-oss: biases, clamped SwiGLU), else
    :func:`swiglu` over ``gate_up[expert]`` and ``down[expert]``.
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
            results[start:end] = (expert_mlp(rows[start:end], expert) if expert_mlp is not None
                                  else swiglu(rows[start:end], gate_up[expert], down[expert], deterministic))
            start = end
    return torch.zeros_like(x).index_add_(0, tokens, results * scale)

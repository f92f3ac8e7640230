"""DeepSeek V4's MoE: scores ``sqrt(softplus(router x))``; a learned layer picks the top-k of the
scores plus a correction bias, a hash layer takes the experts its token id's row of ``tid2eid``
names; the chosen scores, renormalised to 1 and times ``routed_scaling``, weigh the experts.
Experts and the shared expert are SiLU-gated MLPs whose gate is clipped above at ``swiglu_limit``
and whose up projection is clipped to [-limit, limit]. Products, softplus and SiLU run with the
given :class:`~.arithmetic.Arithmetic`; each token's experts are added in expert order."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.deepseek_v4.arithmetic import PLAIN, Arithmetic


def clamped_swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, limit: float,
                   ops: Arithmetic = PLAIN) -> torch.Tensor:
    gate, up = ops.linear(x, gate_up).chunk(2, -1)
    if limit:
        gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
    return ops.linear(ops.elementwise(F.silu, gate) * up, down)


def route(x: torch.Tensor, ids: torch.Tensor, moe, top_k: int, scaling: float,
          ops: Arithmetic = PLAIN) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights [n, top_k] (fp32) and expert indices [n, top_k] of normed hidden states ``x``."""
    scores = ops.elementwise(F.softplus, ops.linear(x, moe.router).float()).sqrt()
    if moe.table is not None:
        experts = moe.table[ids]
    else:
        choice = scores if moe.bias is None else scores + moe.bias
        experts = ops.top_k(choice, top_k)
    weights = scores.gather(1, experts)
    return weights / (weights.sum(-1, keepdim=True) + 1e-20) * scaling, experts


def moe_mlp(x: torch.Tensor, ids: torch.Tensor, moe, arch, ops: Arithmetic = PLAIN) -> torch.Tensor:
    """The MoE output [n, hidden] of normed hidden states ``x`` [n, hidden] of tokens ``ids`` [n]."""
    weights, experts = route(x, ids, moe, arch.top_k, arch.routed_scaling, ops)
    out = torch.zeros_like(x)
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=arch.experts).tolist()
    tokens, scale = order // experts.shape[1], weights.reshape(-1)[order].to(x.dtype)[:, None]
    start = 0
    for expert, count in enumerate(counts):
        if count:
            rows = tokens[start:start + count]
            result = clamped_swiglu(x[rows], moe.gate_up[expert], moe.down[expert], arch.swiglu_limit, ops)
            out.index_add_(0, rows, result * scale[start:start + count])
            start += count
    if moe.shared_gate_up is not None:
        out = out + clamped_swiglu(x, moe.shared_gate_up, moe.shared_down, arch.swiglu_limit, ops)
    return out

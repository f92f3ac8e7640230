"""Gemma 4's MoE block, run beside each layer's dense MLP (``enable_moe_block``).

As transformers' ``Gemma4TextRouter`` / ``Gemma4TextExperts``: the router reads the residual stream,
RMS-normed without a weight, times ``scale`` and 1/sqrt(hidden); softmax (fp32) over all experts,
the top k renormalised to sum to 1, then times each chosen expert's ``per_expert_scale``. The experts
(gated by the model's activation) read the residual normed by ``pre_feedforward_layernorm_2``; their
sum is normed by ``post_feedforward_layernorm_2``. Each chosen expert runs once over all its tokens.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from kvgate.models.gemma4.arch import Gemma4Arch
from kvgate.models.gemma4.weights import Gemma4Moe


def route(x: torch.Tensor, moe: Gemma4Moe, arch: Gemma4Arch, norm: Callable,
          linear: Callable = F.linear) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights [n, top_k] (fp32) and experts [n, top_k] of the residual rows ``x``."""
    scaled = norm(x, None) * moe.scale * arch.hidden_size ** -0.5
    probabilities = linear(scaled, moe.proj).softmax(-1, dtype=torch.float32)
    weights, experts = probabilities.topk(arch.top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights * moe.per_expert_scale[experts], experts


def moe_block(x: torch.Tensor, moe: Gemma4Moe, arch: Gemma4Arch, norm: Callable, act: Callable,
              linear: Callable = F.linear) -> torch.Tensor:
    """The experts' normed output for residual rows ``x`` [n, hidden]. With a row-invariant ``linear``
    and ``act`` (the deterministic mode) a token's bits do not depend on the other rows: each token
    sums its experts in expert order, one add at a time."""
    weights, experts = route(x, moe, arch, norm, linear)
    normed = norm(x, moe.pre_norm)
    top_k = experts.shape[1]
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)
    tokens = order // top_k
    counts = torch.bincount(flat, minlength=arch.experts).tolist()
    rows = normed.index_select(0, tokens)
    scale = weights.reshape(-1).index_select(0, order)[:, None]
    results = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, scale.dtype), device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            end = start + count
            gate, up = linear(rows[start:end], moe.gate_up[expert]).chunk(2, -1)
            results[start:end] = linear(act(gate) * up, moe.down[expert]) * scale[start:end]
            start = end
    out = torch.zeros_like(x).index_add_(0, tokens, results.to(x.dtype))
    return norm(out, moe.post_norm_experts)

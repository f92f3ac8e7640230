"""Routers: each token's ``top_k`` experts and their weights, computed in fp32."""

from __future__ import annotations

from typing import Optional

import torch

from kvgate.models.invariant_elementwise import invariant
from kvgate.models.moe.config import MoeConfig


def route(logits: torch.Tensor, config: MoeConfig, correction_bias: Optional[torch.Tensor] = None,
          deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights [n, top_k] (fp32) and expert indices [n, top_k] for router ``logits`` [n, experts];
    ``deterministic``: the sigmoid rounds each element as it would in any other call."""
    logits = logits.float()
    if config.scoring == "softmax":
        scores = choice = logits.softmax(-1)
    else:
        scores = invariant(torch.sigmoid, logits) if deterministic else logits.sigmoid()
        choice = scores if correction_bias is None else scores + correction_bias
    if config.groups > 1:
        choice = _keep_best_groups(choice, config)
    experts = choice.topk(config.top_k, dim=-1).indices
    weights = scores.gather(1, experts)
    if config.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    if config.routed_scaling != 1.0:
        weights = weights * config.routed_scaling
    return weights, experts


def _keep_best_groups(choice: torch.Tensor, config: MoeConfig) -> torch.Tensor:
    """``choice`` with every expert outside the ``topk_groups`` best groups set to -inf."""
    n = choice.shape[0]
    grouped = choice.view(n, config.groups, -1)
    group_scores = grouped.topk(2, dim=-1).values.sum(-1)
    best = group_scores.topk(config.topk_groups, dim=-1).indices
    keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    return grouped.masked_fill(~keep[:, :, None], float("-inf")).view(n, -1)

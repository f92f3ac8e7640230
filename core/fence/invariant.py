"""The tight zone's allowed set: only tokens after which the closing path still fits.

Checking a token costs a copy of the grammar state and usually a replay of the known closing
path (a fresh walk when that no longer ends the structure), so not every allowed token is tried:
the candidates go in order of their logits, until the tokens that fit hold ``COVERED`` of the
probability mass or ``TRIES`` tokens were tried. Untried tokens are removed (in the tight zone the
sample comes from the model's likeliest tokens that fit); when none fits, the closing path's
first token is the only one left, which keeps the invariant by construction.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

TRIES = 4
COVERED = 0.95


def keep_fitting(plan, matcher, mask: Optional[np.ndarray], logits: torch.Tensor, budget: int,
                 stop_ids: tuple[int, ...]) -> np.ndarray:
    """``mask`` narrowed to the tried tokens that keep the closing invariant (never empty)."""
    vocab = plan.closer.info.vocab_size if mask is None else mask.shape[0]
    row = logits[:vocab].float()
    if mask is not None:
        row = row.masked_fill(torch.from_numpy(~mask).to(row.device), float("-inf"))
    probs = torch.softmax(row, dim=-1)
    top = torch.topk(probs, min(TRIES, vocab))
    keep, covered = [], 0.0
    for p, token in zip(top.values.tolist(), top.indices.tolist()):
        if p <= 0.0:
            break
        if token in stop_ids or plan.fits(matcher, token, budget):
            keep.append(token)
            covered += p
            if covered >= COVERED:
                break
    if not keep:
        keep = plan.path[:1] if plan.path else list(stop_ids)  # an empty path: the output may end
    out = np.zeros(vocab, dtype=np.bool_)
    out[keep] = True
    return out

"""Compressed entries and the lightning indexer of DeepSeek V4.

A compressor pools each window of ``rate`` tokens' raw projections ``kv``, ``gate`` into one entry:
``norm(sum_j softmax_j(gate_j + ape_j) * kv_j)``, rotated (compressed rope) at the window's first
position. HCA windows stand alone. A CSA projection has two series of ``dims`` each: the second
(``Cb``) belongs to its own window, the first (``Ca``) to the *next* window's entry, so entry ``w``
pools ``2 * rate`` slots: Ca of window ``w - 1`` and Cb of window ``w`` (window 0's Ca slots are
empty). Entry ``w`` is visible to the query at position ``p`` once its window is complete:
``w < (p + 1) // rate``.

The indexer (CSA only) compresses its own projections the same way at ``index_dim`` and scores
entry ``w`` for a query as ``sum_h weight_h * relu(q_h . k_w) / sqrt(index_dim)``; the query
attends to the ``index_topk`` best-scoring visible entries (ties to the earliest entry).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from kvgate.models.deepseek_v4.rotary import InterleavedRotary, rotate
from kvgate.models.invariant_dots import invariant_dots, weighted_head_sum


def compress(kv: torch.Tensor, gate: torch.Tensor, compressor, dims: int, overlap: bool, first_window: int,
             previous: Optional[tuple[torch.Tensor, torch.Tensor]], rotary: InterleavedRotary,
             eps: float, exact: bool = False) -> torch.Tensor:
    """Entries [windows, dims] of the complete windows whose raw projections are ``kv``, ``gate``
    [windows * rate, width]; ``previous`` is the (kv, gate) [rate, width] of the window before
    ``first_window`` (CSA, when there is one). ``exact``: a window's slots are added in order, so an
    entry's bits do not depend on how many windows one call pools."""
    rate, width = compressor.bias.shape
    windows = kv.shape[0] // rate
    if windows == 0:
        return kv.new_zeros(0, dims)
    values = kv.view(windows, rate, width)
    logits = gate.view(windows, rate, width) + compressor.bias
    if overlap:
        values, logits = _overlapping(values, logits, dims, previous, compressor.bias)
    weights = logits.softmax(dim=1, dtype=torch.float32).to(kv.dtype)
    products = values * weights
    pooled = sum(products.unbind(1)[1:], products[:, 0].float()).to(kv.dtype) if exact else products.sum(1)
    normed = (F.rms_norm(pooled.float(), (dims,), eps=eps) * compressor.norm).to(kv.dtype)
    positions = (torch.arange(windows, device=kv.device) + first_window) * rate
    return rotate(normed, *rotary.angles(positions))


def _overlapping(values, logits, dims: int, previous, bias):
    """The 2 * rate slots of each CSA entry: the previous window's Ca series, then this window's Cb."""
    windows, rate = values.shape[:2]
    before_values = values.new_zeros(windows, rate, dims)
    before_logits = logits.new_full((windows, rate, dims), float("-inf"))
    before_values[1:], before_logits[1:] = values[:-1, :, :dims], logits[:-1, :, :dims]
    if previous is not None:
        before_values[0] = previous[0][:, :dims]
        before_logits[0] = previous[1][:, :dims] + bias[:, :dims]
    return (torch.cat([before_values, values[..., dims:]], 1), torch.cat([before_logits, logits[..., dims:]], 1))


def visible_entries(positions: torch.Tensor, entries: int, rate: int) -> torch.Tensor:
    """Bool [n, entries]: which entries each query position may attend to."""
    return torch.arange(entries, device=positions.device)[None, :] < ((positions + 1) // rate)[:, None]


def index_scores(queries: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor,
                 exact: bool = False) -> torch.Tensor:
    """Scores [n, entries] (fp32) of queries [n, heads, dim] against indexer entries [entries, dim];
    ``exact``: each score's bits the same in any call (the deterministic mode)."""
    if exact:
        n, heads, dim = queries.shape
        dots = invariant_dots(queries.reshape(n * heads, dim).float(), keys.float()).view(n, heads, -1)
        return weighted_head_sum(dots.relu() * dim ** -0.5, head_weights.float())
    dots = torch.einsum("nhd,ed->nhe", queries.float(), keys.float()).relu() * queries.shape[-1] ** -0.5
    return (dots * head_weights.float()[:, :, None]).sum(1)


def select(scores: torch.Tensor, visible: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices [n, k'] of each row's ``k`` best visible entries (k' = min(k, entries)) and whether each
    pick is real [n, k'] (a row with fewer visible entries pads with invalid picks)."""
    k = min(k, scores.shape[-1])
    masked = scores.masked_fill(~visible, float("-inf"))
    order = masked.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    return order, visible.gather(1, order)

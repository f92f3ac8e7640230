"""Dot products of query rows against a varying number of keys, each the same bits in any call
(the deterministic mode's indexer scores).

A score's bits depend on the shape of the product that computes it (see
:mod:`kvgate.models.invariant_linear`), and both the query rows and the keys vary: a prefill scores
many queries against the keys up to its end, a decode step one query against its session's. So the
keys go in tiles of :data:`KEY_TILE`, counted from the first key and zero-padded, each multiplied
by :func:`invariant_linear` (rows in fixed tiles): every score comes from a product of one fixed
shape, at the same place in it whatever the call holds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_linear import invariant_linear

KEY_TILE = 256


def invariant_dots(rows: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``rows @ keys.T`` [R, T] of rows [R, dim] and keys [T, dim], in their dtype."""
    count = keys.shape[0]
    if count == 0:
        return rows.new_zeros(rows.shape[0], 0)
    tiles = F.pad(keys, (0, 0, 0, -count % KEY_TILE)).split(KEY_TILE)
    return torch.cat([invariant_linear(rows, tile) for tile in tiles], -1)[:, :count]


def weighted_head_sum(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``sum_h weights[:, h] * values[:, h]`` [n, T] of values [n, heads, T] and weights [n, heads],
    added head by head in order (elementwise, so no call shape changes a bit)."""
    total = weights[:, :1] * values[:, 0]
    for head in range(1, values.shape[1]):
        total = total + weights[:, head:head + 1] * values[:, head]
    return total

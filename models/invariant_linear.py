"""Dense products whose rows do not depend on the other rows of the call (the deterministic mode).

torch's CPU math libraries choose their blocking, and with it the order of each output's sum, by
the number of rows in a call. Measured with torch 2.13 on 2 threads: on AVX2, fp32 rows of calls
under 12 rows (but for 4 and 8) round differently; on AVX-512, bf16 and fp32 rows of calls of 2 to
129 rows round differently from the same rows in a larger call, in patterns that change with the
weight's shape (SmolLM2's qkv: 2-32 rows; its o, down and head: 33-129). A row's bits must not
depend on how a prefill was split or which requests share a decode step, so on CPU every dense
product runs in calls of exactly :data:`TILE_ROWS` rows, the last padded with zero rows: each row
then takes the one kernel path a call of that size takes, whatever else is in it. Elsewhere (CUDA)
calls of fewer than :data:`MIN_ROWS` rows are padded to it.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

TILE_ROWS = 16
MIN_ROWS = {torch.float32: 12}  # off CPU: the fewest rows a call runs with (else 2)


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for x [rows, in], each output row computed as it would be in
    any other call."""
    rows = x.shape[0]
    if x.device.type != "cpu":
        least = MIN_ROWS.get(x.dtype, 2)
        return F.linear(F.pad(x, (0, 0, 0, least - rows)), weight, bias)[:rows] if rows < least else F.linear(x, weight, bias)
    if rows == TILE_ROWS:
        return F.linear(x, weight, bias)
    tiles = F.pad(x, (0, 0, 0, -rows % TILE_ROWS)).split(TILE_ROWS)
    out = torch.empty(len(tiles) * TILE_ROWS, weight.shape[0], dtype=x.dtype, device=x.device)
    for index, tile in enumerate(tiles):
        out[index * TILE_ROWS:(index + 1) * TILE_ROWS] = F.linear(tile, weight, bias)
    return out[:rows]


def invariant_einsum(equation: str, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``torch.einsum(equation, x, weight)`` for an ``x`` whose first dimension is rows (tokens) and
    a ``weight`` without one (per-head products: ``"nhd,hdr->nhr"``), each output row computed as it
    would be in any other call: the rows go in tiles of :data:`TILE_ROWS`, the last padded with zeros."""
    rows = x.shape[0]
    if x.device.type != "cpu" or rows == TILE_ROWS:
        return torch.einsum(equation, x, weight)
    padding = [0, 0] * (x.dim() - 1) + [0, -rows % TILE_ROWS]
    tiles = F.pad(x, padding).split(TILE_ROWS)
    return torch.cat([torch.einsum(equation, tile, weight) for tile in tiles])[:rows]

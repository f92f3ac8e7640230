"""Batch- and split-invariant attention: the deterministic default (``engine.deterministic``).

A query's output depends only on its own query vector and the keys and values it may see, never
on how many other queries share the call, where a prefill was split, or how far a batch pads its
keys. Then a token computed in a one-forward prefill, in a chunk, as a cache hit's append or as a
decode step, alone or in a batch, gets bit-identical K/V and logits (the model's linear layers are
row-invariant on their own; ``tests/models/test_invariant_attention.py`` checks both on this
machine's math library).

On CPU it is torch's flash-attention kernel with every shape its per-row arithmetic depends on
held fixed (measured on torch 2.13, bf16 and fp32):

- a row's keys are walked in blocks of :data:`KEY_BLOCK`, the kernel's own key block, counted from
  absolute position 0. Keys are padded to a whole number of blocks and hidden by an additive mask,
  so the last block is never shorter on one path than on another; a block a row cannot see at all
  leaves its sums exactly as they were, so a longer padding (a batch's longest row) changes nothing;
- no block of query rows the kernel splits a call into is shorter than :data:`MIN_ROWS` (a call of
  fewer rows, or a last block of 1-3 rows, takes a path that rounds differently): calls are padded
  to :func:`padded_rows` (the kernel's split: 32 rows below 192, 64 below 768, else 256).

Elsewhere (CUDA) the same function runs plain torch ops padded to fixed tiles
(:mod:`kvgate.models.invariant_tiles`).

A prefill's queries go in chunks of :data:`QUERY_CHUNK` tokens, each over the keys up to its last
position, which bounds the mask and keeps the work close to a causal kernel's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_tiles import tiled_attention

KEY_BLOCK = 512
MIN_ROWS = 4
QUERY_CHUNK = 256

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def padded_keys(keys: int) -> int:
    """The key count a call over ``keys`` keys runs with: whole :data:`KEY_BLOCK` blocks."""
    return -(-keys // KEY_BLOCK) * KEY_BLOCK


def padded_rows(rows: int) -> int:
    """The query rows a call of ``rows`` rows runs with: at least :data:`MIN_ROWS`, and a last
    block of the kernel's split (see the module docstring) of none or at least MIN_ROWS rows."""
    rows = max(rows, MIN_ROWS)
    tail = rows % (32 if rows < 192 else 64 if rows < 768 else 256)
    return rows + MIN_ROWS - tail if 0 < tail < MIN_ROWS else rows


def invariant_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """q [B, n, heads, dim] over k, v [B, keys, kv_heads, dim], key j at absolute position j;
    ``positions`` [B, n]: a query sees the keys at or before its position. Returns q's shape and dtype."""
    return InvariantAttention(positions, q.shape[2] // k.shape[2], q.dtype)(q, k, v)


class InvariantAttention:
    """The attention of one forward's queries at ``positions`` [B, n], built once and called per layer
    (the masks are the same in every layer). ``k`` and ``v`` may hold more keys than the queries see:
    what lies past them is never read into a result, so a caller that gathers them can gather
    :func:`padded_keys` of them and spare a copy."""

    def __init__(self, positions: torch.Tensor, group: int, dtype: torch.dtype):
        self.positions, self.group, self.dtype = positions, group, dtype
        self.masks: dict[int, tuple[bool, torch.Tensor]] = {}  # first query -> (causal run, mask over its keys)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.device.type != "cpu":
            return tiled_attention(q, k, v, self.positions)
        n = q.shape[1]
        parts = [self._attend(q[:, s:s + QUERY_CHUNK], k, v, s) for s in range(0, n, QUERY_CHUNK)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, 1)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, first: int) -> torch.Tensor:
        if first not in self.masks:
            positions = self.positions[:, first:first + q.shape[1]]
            keys = padded_keys(int(positions.max()) + 1)
            causal = _causal_run(positions)
            mask = _staircase(positions[0], keys, self.dtype) if causal else _rows_mask(positions, self.group, keys,
                                                                                        self.dtype)
            self.masks[first] = causal, mask
        causal, mask = self.masks[first]
        keys = mask.shape[-1]
        k_t, v_t = (_keys(t, keys) for t in (k, v))
        return (_attend_causal if causal else _attend_rows)(q, k_t, v_t, mask)


def _attend_rows(q: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Any queries: a token's query heads of one KV group stacked as rows (to :func:`padded_rows`)."""
    batch, n, heads, dim = q.shape
    kv_heads, keys = k_t.shape[1], k_t.shape[2]
    group, rows = heads // kv_heads, n * heads // kv_heads
    stacked = q.reshape(batch, n, kv_heads, group, dim).permute(0, 2, 1, 3, 4).reshape(batch, kv_heads, rows, dim)
    stacked = F.pad(stacked, (0, 0, 0, padded_rows(rows) - rows))
    out = _flash(stacked, k_t, v_t, attn_mask=mask.expand(batch, kv_heads, -1, keys))[0]
    out = out[:, :, :rows].view(batch, kv_heads, n, group, dim).permute(0, 2, 1, 3, 4)
    return out.reshape(batch, n, heads, dim)


def _attend_causal(q: torch.Tensor, k_t: torch.Tensor, v_t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One sequence's consecutive queries (at least MIN_ROWS), in reverse order so that the causal
    mask is a staircase view (:func:`_staircase`); a call per KV head, its keys shared by the group.
    Rows that pad the call to :func:`padded_rows` go first (never fully masked; never read)."""
    _, n, heads, dim = q.shape
    kv_heads, keys = k_t.shape[1], k_t.shape[2]
    group, pad = heads // kv_heads, mask.shape[2] - n
    reversed_q = F.pad(q.flip(1), (0, 0, 0, 0, pad, 0)).transpose(1, 2)  # [1, heads, pad + n, dim]
    outs = []
    for h in range(kv_heads):
        shared = lambda t: t[:, h:h + 1].expand(1, group, keys, dim)  # noqa: E731
        outs.append(_flash(reversed_q[:, h * group:(h + 1) * group], shared(k_t), shared(v_t),
                           attn_mask=mask.expand(1, group, pad + n, keys))[0])
    return torch.cat(outs, 1)[:, :, pad:].transpose(1, 2).flip(1)


def _causal_run(positions: torch.Tensor) -> bool:
    """One sequence's consecutive positions, at least MIN_ROWS of them."""
    n = positions.shape[1]
    return positions.shape[0] == 1 and n >= MIN_ROWS and int(positions[0, -1] - positions[0, 0]) == n - 1


def _rows_mask(positions: torch.Tensor, group: int, keys: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [B, 1, rows, keys]: a row (query, head) hides the keys after its position; rows
    that pad a call to :func:`padded_rows` see what the last query sees."""
    row_positions = positions.repeat_interleave(group, 1)
    rows = row_positions.shape[1]
    row_positions = F.pad(row_positions, (0, padded_rows(rows) - rows), value=int(positions.max()))
    hidden = torch.arange(keys, device=positions.device)[None, None, :] > row_positions[:, :, None]
    return torch.zeros(hidden.shape, dtype=dtype, device=positions.device).masked_fill_(hidden, float("-inf"))[:, None]


def _staircase(positions: torch.Tensor, keys: int, dtype: torch.dtype) -> torch.Tensor:
    """The causal mask [1, 1, rows, keys] of queries at consecutive ``positions``, in reverse order
    after ``pad = rows - n`` padding rows (:func:`padded_rows`), as a view of one buffer of ``rows +
    keys`` values: row r hides key j exactly when ``r + j > last + pad``, so reversed query t (position
    ``last - t``, row ``pad + t``) hides the keys past its position, and its row starts pad + t
    values into the buffer. However long the prefill, its mask takes no more memory than that."""
    n, last = positions.shape[0], int(positions[-1])
    rows = padded_rows(n)
    buffer = torch.zeros(rows + keys, dtype=dtype, device=positions.device)
    buffer[last + rows - n + 1:] = float("-inf")
    return buffer.as_strided((1, 1, rows, keys), (0, 0, 1, 1))


def _keys(t: torch.Tensor, keys: int) -> torch.Tensor:
    """[B, keys', kv, dim] -> a [B, kv, keys, dim] view (a zero-padded copy when keys' < keys)."""
    if t.shape[1] < keys:
        t = F.pad(t, (0, 0, 0, 0, 0, keys - t.shape[1]))
    return t[:, :keys].transpose(1, 2)

"""The gated delta rule of one linear-attention layer, in fp32: chunked (prefill) and recurrent (decode).

Per value head the state ``S`` [k_dim, v_dim] is decayed by ``exp(g)`` and corrected towards each
token's value: ``S <- exp(g) S + k (beta (v - exp(g) S^T k))^T``, and a token reads ``S^T q``.

The chunked form runs whole chunks of ``size`` rows (a short last chunk is padded with rows that
change nothing), solving each chunk's updates at once with a unit lower-triangular system. Every
product has the chunk's fixed shape, and an output row only reads rows at or before it (the
triangular mask zeroes the rest exactly), so a row's output is bit-identical whether later rows of
its chunk are real tokens, padding or not yet known; the state at a chunk's end is too. The caller
therefore starts chunks at absolute multiples of ``size`` (:mod:`.linear_state`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_elementwise import invariant


def prepared(rows: torch.Tensor, gates: torch.Tensor, k_heads: int, k_dim: int, v_heads: int):
    """q, k [n, v_heads, k_dim] (L2-normalised, q scaled by k_dim^-0.5), v [n, v_heads, v_dim], g and
    beta [n, v_heads], all fp32, from convolved rows [n, conv_dim] and gates [n, 2, v_heads]."""
    n = rows.shape[0]
    q, k, v = rows.float().split([k_heads * k_dim, k_heads * k_dim, rows.shape[1] - 2 * k_heads * k_dim], -1)
    repeat = v_heads // k_heads
    q, k = (t.view(n, k_heads, k_dim).repeat_interleave(repeat, 1) for t in (q, k))
    q, k = (t * invariant(torch.rsqrt, (t * t).sum(-1, keepdim=True) + 1e-6) for t in (q, k))
    return q * k_dim ** -0.5, k, v.view(n, v_heads, -1), gates[:, 0], gates[:, 1]


def chunked(q, k, v, g, beta, state: torch.Tensor, size: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Outputs [n, heads, v_dim] of rows that start a chunk, from ``state`` [heads, k_dim, v_dim] at
    its start; and the state at the end of each chunk (of the last one: after its last real row).
    Chunk by chunk, so that every product has the same shapes whatever the call holds."""
    n = q.shape[0]
    pad = -n % size
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).transpose(0, 1) for t in (q, k, v))  # [heads, rows, dims]
    g, beta = (F.pad(t, (0, 0, 0, pad)).transpose(0, 1) for t in (g, beta))
    seen = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    outs, states = [], []
    for first in range(0, n + pad, size):
        rows = slice(first, first + size)
        out, state = _chunk(q[:, rows], k[:, rows], v[:, rows], g[:, rows], beta[:, rows], state, seen)
        outs.append(out)
        states.append(state)
    return torch.cat(outs, 1)[:, :n].transpose(0, 1), states


def _chunk(q, k, v, g, beta, state, seen) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk's outputs [heads, size, v_dim] and the state at its end."""
    decay = g.cumsum(-1)  # [heads, size]: log decay from the chunk's start through each row
    between = (decay[..., :, None] - decay[..., None, :]).masked_fill(~seen, float("-inf")).exp()
    k_beta = k * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * between
    values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    reads = torch.linalg.solve_triangular(system, k_beta * decay.exp()[..., None], upper=False, unitriangular=True)
    corrected = values - reads @ state
    out = (q * decay.exp()[..., None]) @ state + ((q @ k.transpose(-1, -2)) * between) @ corrected
    k_to_end = k * (decay[..., -1:] - decay).exp()[..., None]
    return out, state * decay[..., -1].exp()[..., None, None] + k_to_end.transpose(-1, -2) @ corrected


def recurrent(q, k, v, g, beta, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of a batch: q, k [B, heads, k_dim], v [B, heads, v_dim], g, beta [B, heads],
    ``state`` [B, heads, k_dim, v_dim]. Returns the outputs [B, heads, v_dim] and the new states."""
    state = state * g.exp()[..., None, None]
    delta = (v - (state * k[..., None]).sum(-2)) * beta[..., None]
    state = state + k[..., None] * delta[..., None, :]
    return (state * q[..., None]).sum(-2), state


def convolved(history: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The causal depthwise convolution with SiLU: ``history`` [..., kernel - 1 + n, channels] (the
    inputs of the ``kernel - 1`` positions before the first new one, then the new ones), ``weight``
    [channels, kernel]. Returns [..., n, channels] in ``history``'s dtype. Tap by tap in fp32, so an
    output row depends on its own window only, not on how many rows the call holds."""
    kernel = weight.shape[1]
    n = history.shape[-2] - kernel + 1
    wide, taps = history.float(), weight.float()
    out = wide[..., 0:n, :] * taps[:, 0]
    for tap in range(1, kernel):
        out = out + wide[..., tap:tap + n, :] * taps[:, tap]
    return invariant(F.silu, out).to(history.dtype)

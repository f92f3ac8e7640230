"""One DeepSeek V4 attention layer over segments (a session's new tokens each).

Queries: ``q_norm(wq_a x)`` (the query residual) through ``wq_b`` into ``heads`` heads, each RMS-normed
without weight and rotated. The layer's one K=V head: ``norm(wkv x)``, rotated; it is both key and
value. A query at position ``p`` sees the keys of positions ``(p - window, p]`` and, in a compressed
layer, the compressed entries visible to it (HCA: all complete windows; CSA: the indexer's top-k of
them). Softmax (scale ``head_dim ** -0.5``) runs over those logits plus the head's sink logit, whose
share is dropped. The output's rope dims are rotated back by ``p``; heads then go through the
grouped projection: ``o_groups`` blocks of heads, each by its own ``wo_a`` block to ``o_lora_rank``
dims, concatenated into ``wo_b``.

Each function takes the :class:`~.arithmetic.Arithmetic` to run with; in the deterministic mode
attention is :func:`~.exact_attention.exact_attend`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.deepseek_v4.arithmetic import PLAIN, Arithmetic
from kvgate.models.deepseek_v4.compressor import index_scores, select, visible_entries
from kvgate.models.deepseek_v4.exact_attention import exact_attend
from kvgate.models.deepseek_v4.rotary import rotate

SCORE_ELEMENTS = 1 << 24  # attention logits held at once: a long prefill's queries go in blocks


def norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMS norm in fp32 with an fp32 weight, back in ``x``'s dtype."""
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * weight).to(x.dtype)


def queries(x: torch.Tensor, attention, arch, cos, sin,
            ops: Arithmetic = PLAIN) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotated, normed queries [n, heads, head_dim] and the query residual [n, q_lora_rank]."""
    residual = norm(ops.linear(x, attention.q_down), attention.q_norm, arch.rms_eps)
    q = ops.linear(residual, attention.q_up).view(-1, arch.heads, arch.head_dim)
    q = F.rms_norm(q.float(), (arch.head_dim,), eps=arch.rms_eps).to(x.dtype)
    return rotate(q, cos, sin), residual


def key_values(x: torch.Tensor, attention, arch, cos, sin, ops: Arithmetic = PLAIN) -> torch.Tensor:
    return rotate(norm(ops.linear(x, attention.kv), attention.kv_norm, arch.rms_eps), cos, sin)


def window_keys(keys: torch.Tensor, positions: torch.Tensor, first_key: int,
                window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's window keys [n, window, dim], gathered from ``keys`` [T, dim] of positions
    [first_key, first_key + T), and which of them exist [n, window] (none before position 0)."""
    index = positions[:, None] - first_key - (window - 1) + torch.arange(window, device=positions.device)[None, :]
    return keys[index.clamp(min=0)], index >= 0


def attend(q: torch.Tensor, keys: torch.Tensor, key_mask: torch.Tensor, entries, entry_mask, sinks) -> torch.Tensor:
    """Attention [n, heads, dim] of queries over their window's ``keys`` [n, W, dim] (``key_mask`` [n, W])
    and ``entries`` -- shared [E, dim] or per query [n, k, dim] -- (``entry_mask`` [n, E or k])."""
    scale = q.shape[-1] ** -0.5
    qf = q.float()
    logits = [torch.einsum("nhd,nwd->nhw", qf, keys.float()).masked_fill(~key_mask[:, None], float("-inf"))]
    if entries is not None:
        equation = "nhd,ed->nhe" if entries.dim() == 2 else "nhd,ned->nhe"
        logits.append(torch.einsum(equation, qf, entries.float()).masked_fill(~entry_mask[:, None], float("-inf")))
    logits = torch.cat(logits, -1) * scale
    sink = sinks.float().view(1, -1, 1).expand(q.shape[0], -1, 1)
    probs = torch.cat([logits, sink], -1).softmax(-1)[..., :-1].to(q.dtype)
    out = torch.einsum("nhw,nwd->nhd", probs[..., :keys.shape[1]], keys)
    if entries is not None:
        equation = "nhe,ed->nhd" if entries.dim() == 2 else "nhe,ned->nhd"
        out = out + torch.einsum(equation, probs[..., keys.shape[1]:], entries)
    return out


def output(attended: torch.Tensor, attention, arch, cos, sin, ops: Arithmetic = PLAIN) -> torch.Tensor:
    """The layer output [n, hidden] of attended values [n, heads, head_dim] (rope undone first)."""
    out = rotate(attended, cos, -sin)
    grouped = out.reshape(out.shape[0], arch.o_groups, -1)
    low = ops.einsum("ngi,gri->ngr", grouped, attention.o_a)
    return ops.linear(low.flatten(1), attention.o_b)


def segment_attention(q, positions, keys_of, entries, indexer_inputs, attention, arch, rate: int,
                      ops: Arithmetic = PLAIN) -> torch.Tensor:
    """Attention of one segment's queries ``q`` [n, heads, dim] at ``positions`` [n].

    ``keys_of(first, end)`` reads the window keys of positions [first, end); ``entries`` [E, dim] are
    the layer's compressed entries (None in a sliding layer); ``indexer_inputs`` (CSA) are the indexer
    queries, head weights and entries of the segment.
    """
    n = q.shape[0]
    keys_per_row = arch.window + (0 if entries is None else entries.shape[0])
    step = max(1, SCORE_ELEMENTS // (arch.heads * keys_per_row))
    out = []
    for row in range(0, n, step):
        rows = slice(row, min(n, row + step))
        at = positions[rows]
        first = max(0, int(at[0]) - arch.window + 1)
        keys, key_mask = window_keys(keys_of(first, int(at[-1]) + 1), at, first, arch.window)
        chosen, chosen_mask = None, None
        if entries is not None and (entries.shape[0] or ops.exact):  # exact: one path with or without entries
            chosen, chosen_mask = entries, visible_entries(at, entries.shape[0], rate)
            if indexer_inputs is not None:
                index_q, head_weights, index_entries = indexer_inputs
                scores = index_scores(index_q[rows], head_weights[rows], index_entries, ops.exact)
                picks, chosen_mask = select(scores, chosen_mask, arch.index_topk)
                chosen = entries[picks]
        if ops.exact:
            out.append(exact_attend(q[rows], keys, key_mask, chosen, chosen_mask, attention.sinks, arch.index_topk))
        else:
            out.append(attend(q[rows], keys, key_mask, chosen, chosen_mask, attention.sinks))
    return torch.cat(out)

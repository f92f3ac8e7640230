"""The lightning indexer of DeepSeek Sparse Attention: which cached tokens each query attends to.

Per token and layer the indexer caches one key ``LayerNorm(wk x)`` (with bias, eps 1e-6), its first
``rope_dim`` dims rotated in split halves. A query ``q`` (``index_heads`` heads from ``wq_b`` of the
query bottleneck's normed output, rotated the same way) scores cached token ``t`` as
``sum_h w_h * relu(q_h . k_t) / sqrt(index_dim)``, with head weights ``w = weights_proj(x) /
sqrt(index_heads)`` (``x`` the layer's normed input); the scale is folded into ``w`` (relu commutes
with a positive factor). The products run in fp32 whatever the model dtype, as Hugging Face's do.

Selection: the ``index_topk`` best-scoring tokens among those the query may see (causal, and not
padding); a query that sees at most ``index_topk`` tokens attends to all of them. Ties at the k-th
score go to the earliest positions, so the choice never depends on the batch or on how a prompt
was split (torch's topk leaves ties unspecified; Hugging Face uses it as is).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.invariant_dots import invariant_dots, weighted_head_sum
from kvgate.models.rope import apply_rotary

KEY_NORM_EPS = 1e-6
SCORE_ELEMENTS = 1 << 25  # per-head fp32 products held at once (128 MiB): prefill rows go in blocks


def rotate_front(x: torch.Tensor, rope_dim: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return torch.cat([apply_rotary(x[..., :rope_dim], cos, sin), x[..., rope_dim:]], -1)


def indexer_key(x: torch.Tensor, weights, rope_dim: int, cos, sin, linear=F.linear) -> torch.Tensor:
    """The cached indexer keys [n, index_dim] of normed hidden states ``x`` [n, hidden]; ``linear``:
    F.linear or the deterministic mode's invariant one."""
    key = F.layer_norm(linear(x, weights.k), weights.k_norm.shape, weights.k_norm, weights.k_norm_bias,
                       KEY_NORM_EPS)
    return rotate_front(key[:, None], rope_dim, cos, sin)[:, 0]


def indexer_queries(x: torch.Tensor, q_in: torch.Tensor, weights, rope_dim: int, cos,
                    sin, linear=F.linear) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries [n, heads, index_dim] and scaled head weights [n, heads] (fp32) of ``x``."""
    heads, dim = weights.head_weights.shape[0], weights.k.shape[0]
    queries = rotate_front(linear(q_in, weights.q_up).view(-1, heads, dim), rope_dim, cos, sin)
    head_weights = linear(x.float(), weights.head_weights) * (heads * dim) ** -0.5
    return queries, head_weights


def index_scores(queries: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Scores [n, T] (fp32) of queries [n, heads, dim] against keys [T, dim] (shared) or [n, T, dim]."""
    dots = torch.matmul(queries.float(), keys.float().transpose(-1, -2))  # [n, heads, T]
    return torch.matmul(head_weights[:, None, :], dots.relu_())[:, 0]


def invariant_index_scores(queries: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """:func:`index_scores` with every score's bits the same in any call (the deterministic mode)."""
    n, heads, dim = queries.shape
    if keys.dim() == 3:  # each query its own keys (a decode batch)
        dots = torch.stack([invariant_dots(queries[i].float(), keys[i].float()) for i in range(n)])
    else:
        dots = invariant_dots(queries.reshape(n * heads, dim).float(), keys.float()).view(n, heads, -1)
    return weighted_head_sum(dots.relu_(), head_weights)


def top_k_mask(scores: torch.Tensor, visible: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [n, T]: each row's ``k`` best-scoring visible tokens (all of them where at most ``k`` are)."""
    if scores.shape[-1] <= k:
        return visible
    scores = scores.masked_fill(~visible, float("-inf"))
    kth = scores.topk(k, -1).values[:, -1:]
    above = scores > kth
    tied = (scores == kth) & visible
    room = k - above.sum(-1, keepdim=True)
    return (above | (tied & (tied.cumsum(-1) <= room))) & visible


def select(queries: torch.Tensor, head_weights: torch.Tensor, keys: torch.Tensor, visible: torch.Tensor,
           k: int, deterministic: bool = False) -> torch.Tensor:
    """:func:`top_k_mask` of :func:`index_scores` (:func:`invariant_index_scores` when
    ``deterministic``), scored in blocks of rows to bound the fp32 products."""
    if visible.shape[-1] <= k:
        return visible
    step = max(1, SCORE_ELEMENTS // (queries.shape[1] * visible.shape[-1]))
    masks = []
    for row in range(0, queries.shape[0], step):
        rows = slice(row, row + step)
        row_keys = keys if keys.dim() == 2 else keys[rows]
        scores = (invariant_index_scores if deterministic else index_scores)(queries[rows], head_weights[rows], row_keys)
        masks.append(top_k_mask(scores, visible[rows], k))
    return torch.cat(masks)

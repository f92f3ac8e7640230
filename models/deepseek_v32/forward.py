"""The DeepSeek V3.2 forward pass: MLA as in :mod:`kvgate.models.deepseek_v3.forward`, each query
attending only to the cached tokens the lightning indexer (:mod:`kvgate.models.deepseek_v32.indexer`)
selects for it in that layer.

Per token and layer the pool holds ``[latent (kv_lora_rank), rotated key (rope_dim), indexer key
(index_dim)]``; attention reads the first two as keys and values, the indexer the last. Where no
query sees more than ``index_topk`` tokens the selection is everything causal and attention runs
as V3's; otherwise one SDPA call per layer takes the selection as a boolean mask.

In the deterministic mode every query goes through the selection (all it may see while that is at
most ``index_topk`` tokens): the indexer's products and scores are invariant
(:func:`~kvgate.models.deepseek_v32.indexer.invariant_index_scores`), its top-k breaks ties by
position, and attention over the selection is
:func:`~kvgate.models.invariant_selection.selected_attention`.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.deepseek_v3.forward import MlaForward
from kvgate.models.deepseek_v32.indexer import indexer_key, indexer_queries, select
from kvgate.models.invariant_selection import selected_attention
from kvgate.models.kv_forward import Context
from kvgate.models.prefill_attention import PrefillAttention


class IndexedMlaForward(MlaForward):
    def _layer_inputs(self, x: torch.Tensor, layer, cos, sin):
        """Normed input, query-bottleneck output, absorbed queries and the cache entries [n, 1, cached_dim]."""
        normed = self._norm(x, layer.attn_norm)
        q_in = self._query_input(normed, layer)
        query, entry = self._query_and_entry(normed, q_in, layer, cos, sin)
        index_key = indexer_key(normed, layer.indexer, self.arch.rope_dim, cos, sin, self._linear)
        return normed, q_in, query, torch.cat([entry, index_key[:, None]], -1)

    def _selection(self, normed, q_in, layer, cos, sin, cached: torch.Tensor, visible: torch.Tensor):
        """Which of the cached tokens [.., T, cached_dim] each query attends to: bool [n, T]."""
        arch = self.arch
        queries, head_weights = indexer_queries(normed, q_in, layer.indexer, arch.rope_dim, cos, sin, self._linear)
        return select(queries, head_weights, cached[..., arch.latent_dim:], visible, arch.index_topk,
                      self.deterministic)

    def _attend_selected(self, query: torch.Tensor, keys: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
        """query [B, n, heads, dim] over keys [B, T, 1, dim] (also the values) where ``selected`` [B, n, T]."""
        if self.deterministic:
            return selected_attention(query, keys, keys, selected)
        return attend_selected(query, keys, selected)

    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Forward ``tokens`` at positions [start, start+n); ``context`` holds the slots of [0, start+n)."""
        n, latent_dim = tokens.shape[0], self.arch.latent_dim
        self.rotary.ensure(start + n)
        positions = torch.arange(start, start + n, device=tokens.device)
        cos, sin = self.rotary.tables(positions)
        sparse = start + n > self.arch.index_topk or self.deterministic
        attend = None if sparse else PrefillAttention(start, n, self.weights.embed.dtype, tokens.device,
                                                      self.fp32_attention_keys)
        causal = torch.arange(start + n, device=tokens.device)[None, :] <= positions[:, None] if sparse else None
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            normed, q_in, query, entry = self._layer_inputs(x, layer, cos, sin)
            self.pool.layer_views[index][0].index_copy_(0, new_slots, entry)
            cached = self._context(index, context) if start else entry
            keys = cached[..., :latent_dim]
            if sparse:
                selected = self._selection(normed, q_in, layer, cos, sin, cached[:, 0], causal)
                attended = self._attend_selected(query[None], keys[None], selected[None])[0]
            else:
                attended = attend(query, keys, keys)
            x = x + self._output(attended, layer)
            x = self._mlp(x, layer)
        return self._head(x if all_logits else x[-1:])

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor,
               context: Context, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One token per row; ``context`` and ``mask`` as in :meth:`LlamaForward.decode`."""
        batch, latent_dim = tokens.shape[0], self.arch.latent_dim
        cos, sin = self.rotary.tables(positions)
        if not isinstance(context, slice):
            context = context.view(-1)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            normed, q_in, query, entry = self._layer_inputs(x, layer, cos, sin)
            self.pool.layer_views[index][0].index_copy_(0, new_slots, entry)
            cached = self._context(index, context).view(batch, -1, self.arch.cached_dim)
            keys = cached[:, :, None, :latent_dim]
            if cached.shape[1] > self.arch.index_topk or self.deterministic:
                visible = visible_keys(None if self.deterministic else mask, cached, positions)
                selected = self._selection(normed, q_in, layer, cos, sin, cached, visible)
                attended = self._attend_selected(query[:, None], keys, selected[:, None])
            else:
                attended = F.scaled_dot_product_attention(query[:, None], keys.transpose(1, 2), keys.transpose(1, 2),
                                                          attn_mask=mask)
            x = x + self._output(attended[:, 0], layer)
            x = self._mlp(x, layer)
        return self._head(x)


def attend_selected(query: torch.Tensor, keys: torch.Tensor, selected: torch.Tensor) -> torch.Tensor:
    """query [B, n, heads, dim] over keys [B, T, 1, dim] (also the values) where ``selected`` [B, n, T]."""
    q, k = query.transpose(1, 2), keys.transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, k, attn_mask=selected[:, None], enable_gqa=True)
    return out.transpose(1, 2)


def visible_keys(mask: Optional[torch.Tensor], cached: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Bool [batch, T]: the decode context's real tokens (``mask`` hides a shorter session's padding;
    without one, each row sees the keys up to its position)."""
    if mask is not None:
        return mask[:, 0, 0] == 0
    return torch.arange(cached.shape[1], device=cached.device)[None] <= positions[:, None]

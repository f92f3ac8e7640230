"""The MLA forward pass over a one-part :class:`KVPool`: prefill (fresh or appended) and batched decode.

Per token and layer the pool holds ``[latent (kv_lora_rank), rotated key (rope_dim)]``. Attention
runs in the absorbed form: each head's query is ``[q_nope @ k_up (latent dims), q_rope]`` against
the cached vectors as one key head shared by all query heads, and the same cached vectors are the
values (their rope dims' outputs are dropped); the attended latent goes through ``v_up`` per head.
The softmax scale is folded into the queries, since SDPA scales by the cached width.

In the deterministic mode every product (per-head ones included) runs in fixed row tiles
(:mod:`kvgate.models.invariant_linear`), attention is :class:`InvariantAttention` with all query
heads on the one cached key head, and the experts are invariant (:func:`moe_mlp`): a token gets the
same bits cold, cached, restored or batched.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.deepseek_v3.arch import DeepseekArch
from kvgate.models.deepseek_v3.weights import DeepseekWeights
from kvgate.models.invariant_attention import InvariantAttention
from kvgate.models.invariant_linear import invariant_einsum, invariant_linear
from kvgate.models.kv_pool import KVPool
from kvgate.models.kv_forward import Context
from kvgate.models.moe.experts import moe_mlp, swiglu
from kvgate.models.prefill_attention import PrefillAttention
from kvgate.models.rope import Rotary, apply_rotary


class MlaForward:
    arithmetic = ""  # torch computes all of it (kvgate.models.kv_forward.KVForward)

    def __init__(self, arch: DeepseekArch, weights: DeepseekWeights, pool: KVPool, rotary: Rotary,
                 fp32_attention_keys: Optional[int] = None, deterministic: bool = False):
        self.arch, self.weights, self.pool, self.rotary = arch, weights, pool, rotary
        self.fp32_attention_keys, self.deterministic = fp32_attention_keys, deterministic
        self.query_scale = arch.softmax_scale * arch.latent_dim ** 0.5

    def _linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return invariant_linear(x, weight) if self.deterministic else F.linear(x, weight)

    def _heads(self, equation: str, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return invariant_einsum(equation, x, weight) if self.deterministic else torch.einsum(equation, x, weight)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, weight.shape, weight, self.arch.rms_eps)

    def _query_input(self, x: torch.Tensor, layer) -> torch.Tensor:
        """What the query up-projection reads: normed ``x`` through the normed bottleneck, if any."""
        return x if layer.q_down is None else self._norm(self._linear(x, layer.q_down), layer.q_norm)

    def _query_and_entry(self, x: torch.Tensor, q_in: torch.Tensor, layer, cos,
                         sin) -> tuple[torch.Tensor, torch.Tensor]:
        """Absorbed queries [n, heads, latent_dim] and cache entries [n, 1, latent_dim] of normed ``x``."""
        arch = self.arch
        q = self._linear(q_in, layer.q_up).view(-1, arch.heads, arch.nope_dim + arch.rope_dim)
        q_latent = self._heads("nhd,hdr->nhr", q[..., :arch.nope_dim], layer.k_up)
        q_rope = apply_rotary(q[..., arch.nope_dim:], cos, sin)
        query = torch.cat([q_latent, q_rope], -1) * self.query_scale
        kv = self._linear(x, layer.kv_down)
        latent = self._norm(kv[:, :arch.kv_lora_rank], layer.kv_norm)
        k_rope = apply_rotary(kv[:, None, arch.kv_lora_rank:], cos, sin)
        return query, torch.cat([latent[:, None], k_rope], -1)

    def _output(self, attended: torch.Tensor, layer) -> torch.Tensor:
        """The attention output [n, hidden] of attended cache vectors [n, heads, latent_dim]."""
        values = self._heads("nhr,hvr->nhv", attended[..., :self.arch.kv_lora_rank], layer.v_up)
        return self._linear(values.reshape(values.shape[0], -1), layer.o)

    def _mlp(self, x: torch.Tensor, layer) -> torch.Tensor:
        normed = self._norm(x, layer.mlp_norm)
        if layer.moe is not None:
            return x + moe_mlp(normed, self.arch.moe, layer.moe, self.deterministic)
        return x + swiglu(normed, layer.gate_up, layer.down, self.deterministic)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(self._norm(x, self.weights.norm), self.weights.lm_head).float()

    def _context(self, index: int, context: Context) -> torch.Tensor:
        (cache,) = self.pool.layer_views[index]
        return cache[context] if isinstance(context, slice) else cache.index_select(0, context)

    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Forward ``tokens`` at positions [start, start+n); ``context`` holds the slots of [0, start+n)."""
        n = tokens.shape[0]
        self.rotary.ensure(start + n)
        cos, sin = self.rotary.tables(torch.arange(start, start + n, device=tokens.device))
        attend = self._prefill_attention(start, n, tokens.device)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            normed = self._norm(x, layer.attn_norm)
            query, entry = self._query_and_entry(normed, self._query_input(normed, layer), layer, cos, sin)
            self.pool.layer_views[index][0].index_copy_(0, new_slots, entry)
            keys = self._context(index, context) if start else entry
            x = x + self._output(attend(query, keys, keys), layer)
            x = self._mlp(x, layer)
        return self._head(x if all_logits else x[-1:])

    def _prefill_attention(self, start: int, n: int, device) -> Callable:
        """attend(query [n, heads, dim], keys, values [keys, 1, dim]) -> [n, heads, dim]."""
        dtype = self.weights.embed.dtype
        if not self.deterministic:
            return PrefillAttention(start, n, dtype, device, self.fp32_attention_keys)
        positions = torch.arange(start, start + n, device=device)[None]
        invariant = InvariantAttention(positions, self.arch.heads, dtype)
        return lambda q, k, v: invariant(q[None], k[None], v[None])[0]

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor,
               context: Context, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One token per row; ``context`` and ``mask`` as in :meth:`LlamaForward.decode`."""
        batch = tokens.shape[0]
        cos, sin = self.rotary.tables(positions)
        if not isinstance(context, slice):
            context = context.view(-1)
        invariant = (InvariantAttention(positions.view(batch, 1), self.arch.heads, self.weights.embed.dtype)
                     if self.deterministic else None)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            normed = self._norm(x, layer.attn_norm)
            query, entry = self._query_and_entry(normed, self._query_input(normed, layer), layer, cos, sin)
            self.pool.layer_views[index][0].index_copy_(0, new_slots, entry)
            keys = self._context(index, context).view(batch, -1, 1, self.arch.latent_dim)
            if invariant is not None:
                attended = invariant(query[:, None], keys, keys)[:, 0]
            else:
                attended = F.scaled_dot_product_attention(query[:, None], keys.transpose(1, 2), keys.transpose(1, 2),
                                                          attn_mask=mask)[:, 0]
            x = x + self._output(attended, layer)
            x = self._mlp(x, layer)
        return self._head(x)

"""The gpt-oss forward pass over a :class:`KVPool`: prefill (fresh or appended) and batched decode.

Each layer writes its new tokens' K/V into their pool slots, then attends to the keys of
consecutive positions it can reach (:mod:`.attention`): all of them in a full-attention layer,
those from ``position - sliding_window + 1`` on in a sliding one; masks are built once a pass, one
per kind of layer. The MLP is the mixture of experts of :mod:`.experts`. RMSNorm runs in fp32 and
multiplies its fp32 weight before rounding, as transformers' does.

``deterministic`` (``engine.deterministic``): every product is row-invariant
(:mod:`kvgate.models.invariant_linear`) and attention runs in fixed tiles from absolute position 0,
window and sinks included (:func:`kvgate.models.invariant_tiles.tiled_attention`), so a token gets
the same bits whatever the split of its prefill or the batch of its decode.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.gpt_oss.arch import GptOssArch
from kvgate.models.gpt_oss.attention import additive_mask, hidden_keys, sink_attention
from kvgate.models.gpt_oss.experts import experts_mlp
from kvgate.models.gpt_oss.weights import GptOssWeights
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.invariant_tiles import tiled_attention
from kvgate.models.kv_pool import KVPool
from kvgate.models.rope import Rotary, apply_rotary

Context = Union[torch.Tensor, slice]  # slot indices ([keys] or [batch, keys]), or a range of consecutive slots


class GptOssForward:
    arithmetic = ""  # torch computes all of it (kvgate.models.kv_forward.KVForward)

    def __init__(self, arch: GptOssArch, weights: GptOssWeights, pool: KVPool, rotary: Rotary,
                 deterministic: bool = False):
        self.arch, self.weights, self.pool, self.rotary = arch, weights, pool, rotary
        self.dtype, self.deterministic = weights.embed.dtype, deterministic
        self.linear = invariant_linear if deterministic else F.linear

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), weight.shape, weight, self.arch.rms_eps).to(x.dtype)

    def _qkv(self, x: torch.Tensor, layer, cos: torch.Tensor, sin: torch.Tensor):
        """q [n, heads, dim], k and v [n, kv_heads, dim] for hidden states x [n, hidden]."""
        arch = self.arch
        qk_width = (arch.heads + arch.kv_heads) * arch.head_dim
        qkv = self.linear(self._norm(x, layer.attn_norm), layer.qkv, layer.qkv_bias)
        qk = apply_rotary(qkv[:, :qk_width].view(-1, arch.heads + arch.kv_heads, arch.head_dim), cos, sin)
        v = qkv[:, qk_width:].view(-1, arch.kv_heads, arch.head_dim)
        return qk[:, : arch.heads], qk[:, arch.heads:], v

    def _store(self, index: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        k_cache, v_cache = self.pool.layer_views[index]
        k_cache.index_copy_(0, slots, k)
        v_cache.index_copy_(0, slots, v)

    def _keys(self, index: int, context: Context, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of layer ``index`` from the ``first``-th context key on: [batch, keys, kv_heads, dim]."""
        k_cache, v_cache = self.pool.layer_views[index]
        if isinstance(context, slice):
            part = slice(context.start + first, context.stop)
            return k_cache[part][None], v_cache[part][None]
        slots = context[..., first:].reshape(-1)
        batch = context.shape[0] if context.dim() == 2 else 1
        return tuple(cache.index_select(0, slots).view(batch, -1, *cache.shape[1:]) for cache in (k_cache, v_cache))

    def _plan(self, positions: torch.Tensor, keys: int) -> Any:
        """How this pass's queries at ``positions`` [batch, n] attend over ``keys`` context keys: in
        deterministic mode the positions themselves, else (first key, additive mask) by whether the
        layer slides."""
        if self.deterministic:
            return positions
        earliest, masks = int(positions.min()), {}
        for sliding in set(self.arch.sliding):
            first = max(0, earliest - self.arch.sliding_window + 1) if sliding else 0
            window = self.arch.sliding_window if sliding else None
            masks[sliding] = first, additive_mask(hidden_keys(positions, first, keys - first, window), self.dtype)
        return masks

    def _attend(self, index: int, q: torch.Tensor, context: Context, plan: Any) -> torch.Tensor:
        """Attention of q [batch, n, heads, dim] over the context keys layer ``index`` can reach."""
        sliding, sinks = self.arch.sliding[index], self.weights.layers[index].sinks
        if self.deterministic:
            k, v = self._keys(index, context, 0)
            return tiled_attention(q, k, v, plan, self.arch.sliding_window if sliding else None, sinks)
        first, mask = plan[sliding]
        k, v = self._keys(index, context, first)
        return sink_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), sinks, mask).transpose(1, 2)

    def _layer(self, x: torch.Tensor, index: int, q: torch.Tensor, context: Context, plan: Any) -> torch.Tensor:
        layer = self.weights.layers[index]
        out = self._attend(index, q, context, plan)
        x = x + self.linear(out.reshape(x.shape[0], -1), layer.o, layer.o_bias)
        return x + experts_mlp(self._norm(x, layer.mlp_norm), self.arch, layer, self.deterministic)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self._norm(x, self.weights.norm), self.weights.lm_head).float()

    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Forward ``tokens`` at positions [start, start+n); ``context`` holds the slots of [0, start+n)
        (None for a fresh prompt). ``interrupted`` is polled before each layer."""
        n = tokens.shape[0]
        positions = torch.arange(start, start + n, device=tokens.device)
        self.rotary.ensure(start + n)
        cos, sin = self.rotary.tables(positions)
        context = context if context is not None else new_slots
        plan = self._plan(positions[None], start + n)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            q, k, v = self._qkv(x, layer, cos, sin)
            self._store(index, new_slots, k, v)
            x = self._layer(x, index, q[None], context, plan)
        return self._head(x if all_logits else x[-1:])

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor,
               context: Context, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One token per row at ``positions``. ``context``: slots [batch, keys] (key j at position j,
        the new token included, padding past it), or for a single row the slot range of its context.
        The runtime's padding ``mask`` is not needed: every key past a row's position is hidden here."""
        batch = tokens.shape[0]
        cos, sin = self.rotary.tables(positions)
        keys = context.stop - context.start if isinstance(context, slice) else context.shape[-1]
        plan = self._plan(positions[:, None], keys)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            q, k, v = self._qkv(x, layer, cos, sin)
            self._store(index, new_slots, k, v)
            x = self._layer(x, index, q.view(batch, 1, *q.shape[1:]), context, plan)
        return self._head(x)

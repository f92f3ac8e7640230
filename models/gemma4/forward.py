"""The Gemma 4 text forward over a :class:`ShapedKVPool`: prefill (fresh or appended) and batched decode.

Per layer, as transformers' ``Gemma4TextDecoderLayer``: RMSNorm (fp32, weight as is) around the
attention and around the MLP (plus the MoE block beside it), q/k RMS-normed per head and v without
a weight, RoPE per layer type, then the per-layer input and the layer's scalar. Embeddings are
scaled by sqrt(hidden); logits are soft-capped. New K/V go into the pool first; a KV-shared layer
reads its source layer's.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.gemma4.arch import SLIDING, Gemma4Arch
from kvgate.models.gemma4.attention import Attention
from kvgate.models.gemma4.moe import moe_block
from kvgate.models.gemma4.pool import ShapedKVPool
from kvgate.models.gemma4.rotary import Rotaries
from kvgate.models.gemma4.weights import Gemma4Layer, Gemma4Weights
from kvgate.models.invariant_elementwise import invariant
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.rope import apply_rotary

Context = Union[torch.Tensor, slice]
ACTIVATIONS = {"gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu, "silu": F.silu}


class Gemma4Forward:
    arithmetic = ""  # torch computes all of it (kvgate.models.kv_forward.KVForward)

    def __init__(self, arch: Gemma4Arch, weights: Gemma4Weights, pool: ShapedKVPool, rotary: Rotaries,
                 deterministic: bool = False):
        self.arch, self.weights, self.pool, self.rotary = arch, weights, pool, rotary
        self.deterministic = deterministic
        activation = ACTIVATIONS[arch.activation]
        self.act = lambda x: invariant(activation, x)  # every element on the vector path, whatever the rows
        self.dtype = weights.embed.dtype
        cached = [i for i in range(arch.layers) if arch.cached(i)]
        self.pool_index = {layer: cached.index(arch.kv_sources[layer]) for layer in range(arch.layers)}

    # --- pieces ------------------------------------------------------------------------------------
    def _linear(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        return invariant_linear(x, weight, bias) if self.deterministic else F.linear(x, weight, bias)

    def norm(self, x: torch.Tensor, weight: Optional[torch.Tensor]) -> torch.Tensor:
        """transformers' Gemma4RMSNorm: in fp32, times ``weight`` (none: unit)."""
        w = None if weight is None else weight.float()
        return F.rms_norm(x.float(), (x.shape[-1],), w, self.arch.rms_eps).to(x.dtype)

    def embed(self, tokens: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Scaled embeddings [n, hidden] and the per-layer inputs [n, layers, per_layer_dim] (or None)."""
        arch, w = self.arch, self.weights
        x = w.embed[tokens] * torch.tensor(arch.hidden_size ** 0.5, dtype=self.dtype)
        if not arch.per_layer_dim:
            return x, None
        shape = (tokens.shape[0], arch.layers, arch.per_layer_dim)
        own = (w.per_layer_embed[tokens] * torch.tensor(arch.per_layer_dim ** 0.5, dtype=self.dtype)).view(shape)
        projected = self._linear(x, w.per_layer_model_projection) * arch.hidden_size ** -0.5
        projected = self.norm(projected.view(shape), w.per_layer_projection_norm)
        return x, (projected + own) * 2.0 ** -0.5

    def _qkv(self, x: torch.Tensor, index: int, layer: Gemma4Layer, positions: torch.Tensor):
        """q [n, heads, dim] and, in a layer with K/V of its own, k and v [n, kv_heads, dim]."""
        arch, dim = self.arch, self.arch.head_dims[index]
        cos, sin = self.rotary.tables(arch.layer_types[index], positions)
        q = self._linear(x, layer.q, layer.biases.get("q")).view(x.shape[0], arch.heads, dim)
        q = apply_rotary(self.norm(q, layer.q_norm), cos, sin)
        if layer.k is None:
            return q, None, None
        k = self._linear(x, layer.k, layer.biases.get("k")).view(x.shape[0], -1, dim)
        v = k if layer.v is None else self._linear(x, layer.v, layer.biases.get("v")).view(x.shape[0], -1, dim)
        return q, apply_rotary(self.norm(k, layer.k_norm), cos, sin), self.norm(v, None)

    def _mlp(self, x: torch.Tensor, layer: Gemma4Layer) -> torch.Tensor:
        gate, up = self._linear(self.norm(x, layer.pre_mlp_norm), layer.gate_up).chunk(2, -1)
        out = self._linear(self.act(gate) * up, layer.down)
        if layer.moe is not None:
            experts = moe_block(x, layer.moe, self.arch, self.norm, self.act, self._linear)
            out = self.norm(out, layer.moe.post_norm_mlp) + experts
        return x + self.norm(out, layer.post_mlp_norm)

    def _per_layer(self, x: torch.Tensor, layer: Gemma4Layer, per_layer: Optional[torch.Tensor]) -> torch.Tensor:
        if per_layer is not None:
            gated = self.act(self._linear(x, layer.per_layer_gate)) * per_layer
            x = x + self.norm(self._linear(gated, layer.per_layer_projection), layer.per_layer_norm)
        return x * layer.scalar

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        logits = self._linear(self.norm(x, self.weights.norm), self.weights.lm_head).float()
        cap = self.arch.final_softcap
        if cap is None:
            return logits
        return invariant(lambda t: torch.tanh(t / cap) * cap, logits)

    def _attention_by_type(self, positions: torch.Tensor, padding: Optional[torch.Tensor] = None) -> dict:
        arch = self.arch
        out = {}
        for kind in set(arch.layer_types):
            index = arch.layer_types.index(kind)
            window = arch.sliding_window if kind == SLIDING else None
            out[kind] = Attention(positions, window, arch.heads, arch.kv_heads[index], arch.head_dims[index],
                                  self.dtype, self.deterministic, padding)
        return out

    def _context(self, index: int, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        k_cache, v_cache = self.pool.layer_views[self.pool_index[index]]
        if isinstance(context, slice):
            return k_cache[context], v_cache[context]
        return k_cache.index_select(0, context), v_cache.index_select(0, context)

    def _write(self, index: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        k_cache, v_cache = self.pool.layer_views[self.pool_index[index]]
        k_cache.index_copy_(0, slots, k)
        v_cache.index_copy_(0, slots, v)

    # --- passes ------------------------------------------------------------------------------------
    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Forward ``tokens`` at positions [start, start+n); ``context`` holds the slots of [0, start+n)
        (None for a fresh prompt: its slots are ``new_slots``)."""
        n = tokens.shape[0]
        positions = torch.arange(start, start + n, device=tokens.device)
        self.rotary.ensure(start + n)
        attention = self._attention_by_type(positions[None])
        context = new_slots if context is None else context
        x, per_layer = self.embed(tokens)
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            q, k, v = self._qkv(self.norm(x, layer.input_norm), index, layer, positions)
            if k is not None:
                self._write(index, new_slots, k, v)
            k, v = self._context(index, context)
            out = attention[self.arch.layer_types[index]].prefill(q, k, v)
            x = x + self.norm(self._linear(out.reshape(n, -1), layer.o, layer.biases.get("o")),
                              layer.post_attention_norm)
            x = self._per_layer(self._mlp(x, layer), layer, None if per_layer is None else per_layer[:, index])
        return self._head(x if all_logits else x[-1:])

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor,
               context: Context, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One token per row. ``context``: slots [batch, keys] (new token included), or for a single
        row the slot range of its context; ``mask`` [batch, 1, 1, keys] hides padding keys."""
        batch = tokens.shape[0]
        attention = self._attention_by_type(positions[:, None], mask)
        flat = context if isinstance(context, slice) else context.reshape(-1)
        x, per_layer = self.embed(tokens)
        for index, layer in enumerate(self.weights.layers):
            q, k, v = self._qkv(self.norm(x, layer.input_norm), index, layer, positions)
            if k is not None:
                self._write(index, new_slots, k, v)
            k, v = self._context(index, flat)
            shape = (batch, -1, self.arch.kv_heads[index], self.arch.head_dims[index])
            out = attention[self.arch.layer_types[index]].decode(q, k.view(shape), v.view(shape))
            x = x + self.norm(self._linear(out, layer.o, layer.biases.get("o")), layer.post_attention_norm)
            x = self._per_layer(self._mlp(x, layer), layer, None if per_layer is None else per_layer[:, index])
        return self._head(x)

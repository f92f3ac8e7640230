"""The Llama forward pass over a :class:`KVPool`: prefill (fresh or appended) and batched decode.

New tokens' K/V are written into their pool slots first; attention then reads the whole context
back by slot index. A fresh prefill attends to its own K/V directly with ``is_causal``; how an append
attends to the prefix and to itself is in :mod:`kvgate.models.prefill_attention`. A layer with
``qk_norm`` RMS-normalises each q and k head before RoPE (Qwen3), or each whole projection
(MiniMax M2); ``rotary_dim`` rotates only the first dims of each head (GLM-4.5); a layer with
``moe`` runs the mixture of experts of :mod:`kvgate.models.moe` as its MLP.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.cpu_kernels.int4 import int4_kernel
from kvgate.models.cpu_kernels.int8 import int8_kernel
from kvgate.models.cpu_kernels.rms_norm import FINGERPRINT as NORM_FINGERPRINT, rms_norm_kernel
from kvgate.models.invariant_attention import InvariantAttention
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.kv_forward import Context
from kvgate.models.prefill_attention import PrefillAttention
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.layers import LlamaArch, LlamaWeights
from kvgate.models.llama.native import context_table, native_layers
from kvgate.models.moe.experts import moe_mlp
from kvgate.models.quant_linear import DENSE_ROWS, TILED_WEIGHTS, linear
from kvgate.models.rope import Rotary, apply_rotary

class LlamaForward:
    keep_hidden = False  # set by an attached MTP head (kvgate.models.kv_forward.HiddenKeeping)
    hidden: Optional[torch.Tensor] = None

    def __init__(self, arch: LlamaArch, weights: LlamaWeights, pool: KVPool, rotary: Rotary,
                 fp32_attention_keys: Optional[int] = None, deterministic: bool = False,
                 qk_norm_over_projection: bool = False):
        self.arch, self.weights, self.pool, self.rotary = arch, weights, pool, rotary
        # q and k RMS-normalised over each whole projection, all heads together (MiniMax M2)
        self.qk_norm_over_projection = qk_norm_over_projection
        # batch- and split-invariant attention (kvgate.models.invariant_attention) on every path
        self.deterministic = deterministic
        self.qk_width = (arch.heads + arch.kv_heads) * arch.head_dim
        # from this many keys on, prefill attention runs in fp32 (None: always in the model dtype)
        self.fp32_attention_keys = fp32_attention_keys
        # RMSNorm in one call for bf16 rows on CPU (kvgate.models.cpu_kernels.rms_norm), on every path
        own_norm = weights.embed.dtype == torch.bfloat16 and weights.embed.device.type == "cpu"
        self.norm_kernel = rms_norm_kernel() if own_norm else None
        if weights.embed.device.type == "cpu" and getattr(weights, "format", "bf16") != "bf16":
            int4_kernel(), int8_kernel()  # built and checked at load, not on the first request
        # every layer in one native call where the weights are packed GGUF blocks (kvgate.models.llama.native)
        self.native = native_layers(arch, weights, pool, rotary.inv_freq, rotary.attention_factor)
        own = [NORM_FINGERPRINT] if self.norm_kernel is not None and self.native is None else []
        self.arithmetic = "".join(own + ([self.native.fingerprint] if self.native is not None else []))

    def _linear(self, x: torch.Tensor, weight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """F.linear, or a quantized weight's own (:mod:`kvgate.models.quant_linear`); in deterministic
        mode a dense product's rows are computed alike in every call (:mod:`kvgate.models.invariant_linear`)."""
        if not isinstance(weight, torch.Tensor):
            return linear(x, weight, bias, None if self.deterministic else DENSE_ROWS)
        return invariant_linear(x, weight, bias) if self.deterministic else F.linear(x, weight, bias)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.norm_kernel is not None and self.norm_kernel.takes(x, weight):
            return self.norm_kernel(x, weight, self.arch.rms_eps)
        return F.rms_norm(x, weight.shape, weight, self.arch.rms_eps)

    def _qkv(self, x: torch.Tensor, layer, cos: torch.Tensor, sin: torch.Tensor):
        """q [n, heads, dim], k and v [n, kv_heads, dim] for hidden states x [n, hidden]."""
        arch = self.arch
        qkv = self._linear(self._norm(x, layer.attn_norm), layer.qkv, layer.qkv_bias)
        qk = qkv[:, : self.qk_width].view(-1, arch.heads + arch.kv_heads, arch.head_dim)
        if layer.qk_norm is not None:
            qk = self._normed_qk(qk, layer.qk_norm)
        rotary = arch.rotary_dim or arch.head_dim
        if rotary == arch.head_dim:
            qk = apply_rotary(qk, cos, sin)
        else:  # partial rotary: the dims past rotary_dim pass through
            qk = torch.cat([apply_rotary(qk[..., :rotary], cos, sin), qk[..., rotary:]], -1)
        v = qkv[:, self.qk_width:].view(-1, arch.kv_heads, arch.head_dim)
        return qk[:, : arch.heads], qk[:, arch.heads:], v

    def _normed_qk(self, qk: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """q and k heads [n, heads + kv_heads, dim] RMS-normalised with the layer's ``norm`` rows:
        each head alone, or each whole projection with :attr:`qk_norm_over_projection`."""
        arch = self.arch
        if not self.qk_norm_over_projection:
            return F.rms_norm(qk, (arch.head_dim,), eps=arch.rms_eps) * norm
        rows, weights, q_width = qk.reshape(qk.shape[0], -1), norm.view(-1), arch.heads * arch.head_dim
        q = F.rms_norm(rows[:, :q_width], (q_width,), weights[:q_width], arch.rms_eps)
        k = F.rms_norm(rows[:, q_width:], (rows.shape[1] - q_width,), weights[q_width:], arch.rms_eps)
        return torch.cat([q, k], -1).view(qk.shape)

    def _mlp(self, x: torch.Tensor, layer) -> torch.Tensor:
        normed = self._norm(x, layer.mlp_norm)
        if layer.moe is not None:
            return x + moe_mlp(normed, self.arch.moe, layer.moe, self.deterministic)
        gate, up = self._linear(normed, layer.gate_up).chunk(2, -1)
        return x + self._linear(F.silu(gate) * up, layer.down)

    def _head(self, x: torch.Tensor, all_rows: bool = True) -> torch.Tensor:
        """Logits of every row of ``x`` (the last one only unless ``all_rows``); with
        :attr:`keep_hidden`, every row's input to the output head is kept for :meth:`take_hidden`."""
        if not self.keep_hidden:
            return self._linear(self._norm(x if all_rows else x[-1:], self.weights.norm), self.weights.lm_head).float()
        self.hidden = self._norm(x, self.weights.norm)
        rows = self.hidden if all_rows else self.hidden[-1:]
        return self._linear(rows, self.weights.lm_head).float()

    def _native_head(self, x: torch.Tensor, all_rows: bool = True) -> torch.Tensor:
        """:meth:`_head` of the native path's fp32 rows (its own final norm)."""
        if self.keep_hidden:
            every = self.native.normed(x)
            self.hidden = every.to(self.weights.embed.dtype)
            normed = every if all_rows else every[-1:]
        else:
            normed = self.native.normed(x if all_rows else x[-1:].contiguous())
        if self.native.head is not None:
            return self.native.logits(normed)
        if not isinstance(self.weights.lm_head, TILED_WEIGHTS):  # a dense or int8 head takes the model dtype
            normed = normed.to(self.weights.embed.dtype)
        return self._linear(normed, self.weights.lm_head).float()

    def take_hidden(self) -> torch.Tensor:
        hidden, self.hidden = self.hidden, None
        return hidden

    def _context(self, index: int, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the context slots of layer ``index``: a view for a slot range, else a gather."""
        k_cache, v_cache = self.pool.layer_views[index]
        if isinstance(context, slice):
            return k_cache[context], v_cache[context]
        return k_cache.index_select(0, context), v_cache.index_select(0, context)

    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Forward ``tokens`` at positions [start, start+n); ``context`` holds the slots of [0, start+n).
        ``interrupted`` is polled before each layer (a long prompt's forward can take seconds)."""
        n = tokens.shape[0]
        positions = torch.arange(start, start + n, device=tokens.device)
        if self.native is not None:
            x = self.native.run(self.weights.embed[tokens].float(), positions, new_slots,
                                context_table(context, new_slots), torch.zeros(n, dtype=torch.int32), interrupted)
            return self._native_head(x, all_logits)
        self.rotary.ensure(start + n)
        cos, sin = self.rotary.tables(positions)
        group = self.arch.heads // self.arch.kv_heads
        attend = (InvariantAttention(positions[None], group, self.weights.embed.dtype) if self.deterministic else
                  PrefillAttention(start, n, self.weights.embed.dtype, tokens.device, self.fp32_attention_keys))
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            q, k, v = self._qkv(x, layer, cos, sin)
            k_cache, v_cache = self.pool.layer_views[index]
            k_cache.index_copy_(0, new_slots, k)
            v_cache.index_copy_(0, new_slots, v)
            if start:
                k, v = self._context(index, context)
            out = attend(q[None], k[None], v[None])[0] if self.deterministic else attend(q, k, v)
            x = x + self._linear(out.reshape(n, -1), layer.o, layer.o_bias)
            x = self._mlp(x, layer)
        return self._head(x, all_logits)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor,
               context: Context, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """One token per row. ``context``: slots [batch, keys] (new token included), or for a single
        row the slot range of its context; ``mask`` [batch, 1, 1, keys] hides padding keys."""
        batch = tokens.shape[0]
        arch = self.arch
        if self.native is not None:
            table = context_table(context, new_slots)
            row_seq = torch.arange(batch, dtype=torch.int32) if table.shape[0] == batch else torch.zeros(batch, dtype=torch.int32)
            return self._native_head(self.native.run(self.weights.embed[tokens].float(), positions, new_slots, table, row_seq))
        cos, sin = self.rotary.tables(positions)
        if not isinstance(context, slice):
            context = context.view(-1)
        group = arch.heads // arch.kv_heads
        invariant = (InvariantAttention(positions.view(batch, 1), group, self.weights.embed.dtype)
                     if self.deterministic else None)
        x = self.weights.embed[tokens]
        for index, layer in enumerate(self.weights.layers):
            q, k, v = self._qkv(x, layer, cos, sin)
            k_cache, v_cache = self.pool.layer_views[index]
            k_cache.index_copy_(0, new_slots, k)
            v_cache.index_copy_(0, new_slots, v)
            k, v = self._context(index, context)
            k = k.view(batch, -1, arch.kv_heads, arch.head_dim)
            v = v.view(batch, -1, arch.kv_heads, arch.head_dim)
            if invariant is not None:
                attn = invariant(q.view(batch, 1, arch.heads, arch.head_dim), k, v)
            else:  # one query per row: the query heads of a kv group are rows against that group's keys
                grouped = q.view(batch, arch.kv_heads, group, arch.head_dim)
                attn = F.scaled_dot_product_attention(grouped, k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
            x = x + self._linear(attn.reshape(batch, -1), layer.o, layer.o_bias)
            x = self._mlp(x, layer)
        return self._head(x)

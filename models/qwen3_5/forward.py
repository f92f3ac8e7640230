"""The Qwen3.5 forward: prefill of one session (fresh, appended, or a replay) and batched decode.

Full-attention layers write their new tokens' K/V into the pool (a replay writes none: its tokens'
K/V are there already) and read the whole context back by slot; their queries carry an output gate
``sigmoid(gate)`` and both q and k an RMSNorm per head before partial RoPE. Linear-attention layers
advance each session's :class:`~.linear_state.LayerState` (:mod:`.linear_attention`). Norms are
zero-centred RMSNorms computed in fp32 (``x * rsqrt(mean(x^2) + eps) * (1 + w)``). In deterministic
mode attention is :mod:`kvgate.models.invariant_attention`'s and dense products are
:mod:`kvgate.models.invariant_linear`'s, as in the Llama forward; packed (int8 / int4) weights run
:func:`kvgate.models.quant_linear.linear`.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import attrs
import torch
import torch.nn.functional as F

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.cpu_kernels.int4 import int4_kernel
from kvgate.models.cpu_kernels.int8 import int8_kernel
from kvgate.models.invariant_attention import InvariantAttention
from kvgate.models.kv_pool import KVPool
from kvgate.models.invariant_linear import invariant_linear
from kvgate.models.prefill_attention import PrefillAttention
from kvgate.models.qwen3_5.arch import Qwen35Arch
from kvgate.models.invariant_elementwise import invariant
from kvgate.models.qwen3_5.linear_attention import LinearMixer
from kvgate.models.qwen3_5.linear_state import LayerState
from kvgate.models.moe.experts import moe_mlp
from kvgate.models.qwen3_5.weights import FullAttention, Qwen35Weights, SharedExpert
from kvgate.models.quant_linear import DENSE_ROWS, linear
from kvgate.models.rope import Rotary, apply_rotary

Context = Union[torch.Tensor, slice]


@attrs.frozen
class PrefillResult:
    logits: Optional[torch.Tensor]  # None for a replay
    states: tuple[LayerState, ...]  # every linear layer's state after the tokens
    snapshots: dict[int, tuple[LayerState, ...]]  # the states at the wanted positions inside the tokens


class Qwen35Forward:
    attention_kernel = None  # no own CPU kernels: the host's fingerprint reads these
    arithmetic = ""  # torch computes all of it (kvgate.models.kv_forward.KVForward)
    keep_hidden = False  # set by an attached MTP head (kvgate.models.kv_forward.HiddenKeeping)

    def __init__(self, arch: Qwen35Arch, weights: Qwen35Weights, pool: KVPool, rotary: Rotary,
                 fp32_attention_keys: Optional[int], deterministic: bool):
        self.arch, self.weights, self.pool, self.rotary = arch, weights, pool, rotary
        self.fp32_attention_keys, self.deterministic = fp32_attention_keys, deterministic
        self.pool_index = {layer: i for i, layer in enumerate(arch.full_layers)}
        self.mixers = {i: LinearMixer(arch, layer.linear, self._linear, deterministic)
                       for i, layer in enumerate(weights.layers) if layer.linear is not None}
        if weights.embed.device.type == "cpu" and weights.format != "bf16":
            int4_kernel(), int8_kernel()  # built and checked at load, not on the first request

    def _linear(self, x: torch.Tensor, weight) -> torch.Tensor:
        """F.linear, or a packed weight's own (:mod:`kvgate.models.quant_linear`: in deterministic mode
        always its batch-invariant kernel)."""
        if not isinstance(weight, torch.Tensor):
            return linear(x, weight, None, None if self.deterministic else DENSE_ROWS)
        return invariant_linear(x, weight) if self.deterministic else F.linear(x, weight)

    def _norm(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return (F.rms_norm(x.float(), scale.shape, eps=self.arch.rms_eps) * scale).to(x.dtype)

    def _mlp(self, x: torch.Tensor, layer) -> torch.Tensor:
        normed = self._norm(x, layer.mlp_norm)
        if layer.moe is not None:
            return x + moe_mlp(normed, self.arch.moe, layer.moe, self.deterministic) + self._shared_expert(normed, layer.shared)
        return x + self._swiglu(normed, layer.gate_up, layer.down)

    def _swiglu(self, x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        gate, up = self._linear(x, gate_up).chunk(2, -1)
        return self._linear(invariant(F.silu, gate) * up, down)

    def _shared_expert(self, x: torch.Tensor, shared: SharedExpert) -> torch.Tensor:
        return invariant(torch.sigmoid, self._linear(x, shared.gate)) * self._swiglu(x, shared.gate_up, shared.down)

    def _head(self, x: torch.Tensor, all_rows: bool) -> torch.Tensor:
        if self.keep_hidden:  # every row's input to the output head, for the MTP layer (:mod:`.mtp_layer`)
            self.hidden = self._norm(x, self.weights.norm)
            return self._linear(self.hidden if all_rows else self.hidden[-1:], self.weights.lm_head).float()
        x = x if all_rows else x[-1:]
        return self._linear(self._norm(x, self.weights.norm), self.weights.lm_head).float()

    def take_hidden(self) -> torch.Tensor:
        """The hidden states kept by the last pass (with :attr:`keep_hidden`), handed over once."""
        hidden, self.hidden = self.hidden, None
        return hidden

    def _qkv(self, x: torch.Tensor, attn: FullAttention, cos, sin):
        """q [n, heads, dim], its gate [n, heads * dim], k and v [n, kv_heads, dim] (q and k rotated)."""
        arch, n, rotary = self.arch, x.shape[0], self.arch.rotary_dim
        q, gate = self._linear(x, attn.q).view(n, arch.heads, 2, arch.head_dim).unbind(2)
        k = self._linear(x, attn.k).view(n, arch.kv_heads, arch.head_dim)
        v = self._linear(x, attn.v).view(n, arch.kv_heads, arch.head_dim)
        q, k = self._norm(q, attn.q_norm), self._norm(k, attn.k_norm)
        q, k = (torch.cat([apply_rotary(t[..., :rotary], cos, sin), t[..., rotary:]], -1) for t in (q, k))
        return q, gate.reshape(n, -1), k, v

    def _context(self, pool_layer: int, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        k_cache, v_cache = self.pool.layer_views[pool_layer]
        if isinstance(context, slice):
            return k_cache[context], v_cache[context]
        return k_cache.index_select(0, context), v_cache.index_select(0, context)

    def _gated_out(self, out: torch.Tensor, gate: torch.Tensor, attn: FullAttention) -> torch.Tensor:
        return self._linear(out.reshape(gate.shape) * invariant(torch.sigmoid, gate), attn.o)

    def prefill(self, tokens: torch.Tensor, start: int, states: Sequence[LayerState], new_slots: Optional[torch.Tensor],
                context: Context, all_logits: bool, wanted: Sequence[int] = (),
                interrupted: Optional[Callable[[], bool]] = None) -> PrefillResult:
        """Forward ``tokens`` at [start, start + n) from the linear layers' ``states``; ``context``:
        the slots of [0, start + n). ``new_slots`` None: a replay (no K/V written, no logits)."""
        n = tokens.shape[0]
        positions = torch.arange(start, start + n, device=tokens.device)
        self.rotary.ensure(start + n)
        cos, sin = self.rotary.tables(positions)
        group = self.arch.heads // self.arch.kv_heads
        dtype = self.weights.embed.dtype
        attend = (InvariantAttention(positions[None], group, dtype) if self.deterministic else
                  PrefillAttention(start, n, dtype, tokens.device, self.fp32_attention_keys))
        x = self.weights.embed[tokens]
        new_states, snapshots = list(states), {}
        linear_index = 0
        for index, layer in enumerate(self.weights.layers):
            if interrupted is not None and interrupted():
                raise PrefillInterrupted(f"prefill of {n} tokens interrupted before layer {index}")
            normed = self._norm(x, layer.attn_norm)
            if layer.linear is not None:
                out, new_states[linear_index], taken = self.mixers[index].prefill(
                    normed, states[linear_index], start, wanted)
                for position, state in taken.items():
                    snapshots.setdefault(position, []).append(state)
                linear_index += 1
                x = x + out
            else:
                x = x + self._full_prefill(normed, layer.full, index, cos, sin, new_slots, context, attend)
            x = self._mlp(x, layer)
        logits = None if new_slots is None else self._head(x, all_logits)
        return PrefillResult(logits, tuple(new_states), {p: tuple(s) for p, s in snapshots.items()})

    def _full_prefill(self, x, attn: FullAttention, index: int, cos, sin, new_slots, context, attend) -> torch.Tensor:
        q, gate, k, v = self._qkv(x, attn, cos, sin)
        pool_layer = self.pool_index[index]
        if new_slots is not None:
            k_pool, v_pool = self.pool.layer_views[pool_layer]
            k_pool.index_copy_(0, new_slots, k)
            v_pool.index_copy_(0, new_slots, v)
        k, v = self._context(pool_layer, context)
        out = attend(q[None], k[None], v[None])[0] if self.deterministic else attend(q, k, v)
        return self._gated_out(out, gate, attn)

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, states: Sequence[Sequence[LayerState]],
               new_slots: torch.Tensor, context: torch.Tensor,
               mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[LayerState, ...]]]:
        """One token per session; ``states[b]``: session b's linear states; ``context`` the slots
        [batch, keys] (new token included), ``mask`` [batch, 1, 1, keys] hides padding (None in the
        deterministic mode, whose attention masks by position). Returns logits and the new states."""
        batch, arch = tokens.shape[0], self.arch
        cos, sin = self.rotary.tables(positions)
        group = arch.heads // arch.kv_heads
        invariant = (InvariantAttention(positions.view(batch, 1), group, self.weights.embed.dtype)
                     if self.deterministic else None)
        flat = context.reshape(-1)
        x = self.weights.embed[tokens]
        columns = [list(column) for column in zip(*states)]  # per linear layer, every session's state
        linear_index = 0
        for index, layer in enumerate(self.weights.layers):
            normed = self._norm(x, layer.attn_norm)
            if layer.linear is not None:
                out, columns[linear_index] = self.mixers[index].decode(normed, columns[linear_index])
                linear_index += 1
                x = x + out
            else:
                q, gate, k, v = self._qkv(normed, layer.full, cos, sin)
                pool_layer = self.pool_index[index]
                k_pool, v_pool = self.pool.layer_views[pool_layer]
                k_pool.index_copy_(0, new_slots, k)
                v_pool.index_copy_(0, new_slots, v)
                keys, values = (t.view(batch, -1, arch.kv_heads, arch.head_dim) for t in self._context(pool_layer, flat))
                queries = q.view(batch, 1, arch.heads, arch.head_dim)
                if invariant is not None:
                    out = invariant(queries, keys, values)
                else:
                    grouped = q.view(batch, arch.kv_heads, group, arch.head_dim)
                    out = F.scaled_dot_product_attention(grouped, keys.transpose(1, 2), values.transpose(1, 2),
                                                         attn_mask=mask)
                x = x + self._gated_out(out, gate, layer.full)
            x = self._mlp(x, layer)
        return self._head(x, True), [tuple(row) for row in zip(*columns)] if columns else [() for _ in states]

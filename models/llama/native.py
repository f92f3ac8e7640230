"""The Llama forward's native path: every layer in one call of ``llama_layer.c`` (issue 29's fused step).

Taken on CPU (``[model] native_layers``, on by default) when every layer's projections are GGUF blocks kept packed (:class:`KQuantWeight` or
:class:`StackedRows` of them) and the layers are plain Llama ones (no q/k norm, no experts); prefill
and decode then both run it, so they compute the same bits for a token whatever the batch or split.
The residual stream is fp32; the final norm too; a head of GGUF blocks runs q8i as the layers do
(``llama_layer.c``), any other head its own matmul.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional

import torch

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.cpu_kernels.kquant import TYPES
from kvgate.models.cpu_kernels.llama_layer import (MAX_PARTS, LayerSpec, LlamaLayerKernel, Matrix, MatrixPart,
                                                   StepRows, llama_layer_kernel)
from kvgate.models.gguf_kquant_weight import KQuantWeight, StackedRows
from kvgate.models.kv_forward import Context
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.layers import LlamaArch, LlamaWeights
from kvgate.models.rope import rope_tables

MAX_ROTARY = 512  # the kernel rotates at most this many dims of a head


def matrix_parts(weight: Any) -> Optional[list[KQuantWeight]]:
    """A projection's packed parts, or None where it is not held as kept GGUF blocks."""
    parts = weight.parts if isinstance(weight, StackedRows) else [weight]
    if not all(isinstance(p, KQuantWeight) and p.type_name in TYPES for p in parts) or len(parts) > MAX_PARTS:
        return None
    return parts


def native_layers(arch: LlamaArch, weights: LlamaWeights, pool: KVPool, inv_freq: torch.Tensor,
                  attention_factor: float) -> Optional["NativeLayers"]:
    """The native path for these weights, or None where it does not apply (then torch's runs)."""
    if not weights.native:
        return None
    rotary = arch.rotary_dim or arch.head_dim
    plain = (arch.hidden_size % 16 == 0 and arch.head_dim % 16 == 0 and rotary % 2 == 0 and rotary <= MAX_ROTARY
             and pool.dtype == torch.bfloat16 and pool.device.type == "cpu" and arch.heads % arch.kv_heads == 0)
    if not plain or any(layer.qk_norm is not None or layer.moe is not None for layer in weights.layers):
        return None
    if any(matrix_parts(w) is None for layer in weights.layers for w in (layer.qkv, layer.o, layer.gate_up,
                                                                           layer.down)):
        return None
    kernel = llama_layer_kernel()
    return None if kernel is None else NativeLayers(kernel, arch, weights, pool, inv_freq, attention_factor)


class NativeLayers:
    """Every layer of one model over its pool: :meth:`run` the layers over fp32 rows."""

    def __init__(self, kernel: LlamaLayerKernel, arch: LlamaArch, weights: LlamaWeights, pool: KVPool,
                 inv_freq: torch.Tensor, attention_factor: float):
        self.kernel, self.arch = kernel, arch
        self.fingerprint = kernel.fingerprint
        self.inv_freq, self.attention_factor = inv_freq, attention_factor
        self.cos = self.sin = torch.empty(0, 2 * inv_freq.shape[0])
        self.keep: list[torch.Tensor] = []  # every tensor a spec points into, alive as long as the specs
        self.final_norm = self._hold(weights.norm.float())
        self.head_weight = weights.lm_head
        self.head = self._head(weights)
        self.specs = (LayerSpec * arch.layers)(*(self._spec(i, layer, pool) for i, layer in enumerate(weights.layers)))

    def _hold(self, tensor: torch.Tensor) -> torch.Tensor:
        self.keep.append(tensor.contiguous())
        return self.keep[-1]

    def _pointer(self, tensor: Optional[torch.Tensor]) -> Optional[int]:
        """The address of an fp32 copy of ``tensor`` kept alive with the specs (None for None)."""
        return None if tensor is None else self._hold(tensor.float()).data_ptr()

    def _head(self, weights: LlamaWeights) -> Optional[torch.Tensor]:
        """A GGUF-block head handed over in q8i's layout (a tied embedding reads its rows from there),
        else None."""
        head = weights.lm_head
        if not isinstance(head, KQuantWeight) or head.type_name not in TYPES:
            return None
        return self._handed_over(head)

    def _handed_over(self, part: KQuantWeight) -> torch.Tensor:
        """``part``'s blocks in q8i's layout, its raw blocks dropped, held with the specs."""
        code = TYPES[part.type_name][0]
        packed = part.native_blocks(lambda raw: self.kernel.q8i_repack(raw, code, part.shape[0], part.shape[1]),
                                    lambda blocks, ids: self.kernel.q8i_rows(blocks, code, part.shape, ids))
        return self._hold(packed)

    def _matrix(self, weight: Any) -> Matrix:
        """A projection's parts in q8i's layout (each part's raw blocks handed over, held once)."""
        parts = matrix_parts(weight)
        matrix = Matrix(count=len(parts), cols=parts[0].shape[1])
        for index, part in enumerate(parts):
            matrix.parts[index] = MatrixPart(self._handed_over(part).data_ptr(), TYPES[part.type_name][0], part.shape[0])
        return matrix

    def _spec(self, index: int, layer, pool: KVPool) -> LayerSpec:
        arch = self.arch
        k_pool, v_pool = pool.layer_views[index]
        return LayerSpec(
            hidden=arch.hidden_size, heads=arch.heads, kv_heads=arch.kv_heads, head_dim=arch.head_dim,
            rotary_dim=arch.rotary_dim or arch.head_dim, intermediate=layer.down.shape[1], eps=arch.rms_eps,
            scale=arch.head_dim ** -0.5, attn_norm=self._pointer(layer.attn_norm), mlp_norm=self._pointer(layer.mlp_norm),
            qkv_bias=self._pointer(layer.qkv_bias), o_bias=self._pointer(layer.o_bias),
            qkv=self._matrix(layer.qkv), o=self._matrix(layer.o), gate_up=self._matrix(layer.gate_up),
            down=self._matrix(layer.down), k_pool=k_pool.data_ptr(), v_pool=v_pool.data_ptr())

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 cos and signed sin [n, rotary] of ``positions``, grown on demand."""
        needed = int(positions.max()) + 1
        if needed > self.cos.shape[0]:
            self.cos, self.sin = rope_tables(self.inv_freq, self.attention_factor,
                                             max(needed, 2 * self.cos.shape[0], 4096))
        return self.cos[positions].contiguous(), self.sin[positions].contiguous()

    def run(self, x: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor, tables: torch.Tensor,
            row_seq: torch.Tensor, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Every layer over x fp32 [rows, hidden] (in place); ``tables`` int64 [seqs, width] the slots of
        each sequence's keys from position 0, ``row_seq`` each row's sequence. With ``interrupted``,
        layer by layer, polling it before each (a prefill); else all layers in one call."""
        cos, sin = self.tables(positions)
        keys = (positions + 1).to(torch.int32)
        new_slots, tables, row_seq = new_slots.to(torch.int64).contiguous(), tables.to(torch.int64).contiguous(), \
            row_seq.to(torch.int32).contiguous()
        step = StepRows(rows=x.shape[0], width=tables.shape[1], threads=torch.get_num_threads(), cos=cos.data_ptr(),
                        sin=sin.data_ptr(), new_slots=new_slots.data_ptr(), tables=tables.data_ptr(),
                        row_seq=row_seq.data_ptr(), row_keys=keys.data_ptr())
        if interrupted is None:
            self._call(0, len(self.specs), x, step)
            return x
        for index in range(len(self.specs)):
            if interrupted():
                raise PrefillInterrupted(f"prefill of {x.shape[0]} tokens interrupted before layer {index}")
            self._call(index, 1, x, step)
        return x

    def _call(self, first: int, count: int, x: torch.Tensor, step: StepRows) -> None:
        spec = ctypes_pointer(self.specs, first)
        if self.kernel.layers(spec, count, x.data_ptr(), step):
            raise MemoryError("native llama layer: no memory for its working buffers")

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        """fp32 logits of final-normed rows through the q8i head (where :attr:`head` is not None)."""
        head = self.head_weight
        return self.kernel.q8i_matmul(normed, self.head, TYPES[head.type_name][0], head.shape[0])

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm of x fp32 [rows, hidden]."""
        out = torch.empty_like(x)
        self.kernel.final_norm(x.data_ptr(), self.final_norm.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1],
                               self.arch.rms_eps)
        return out


def ctypes_pointer(specs, first: int):
    """A pointer to ``specs[first]`` (an array of LayerSpec)."""
    return ctypes.cast(ctypes.byref(specs, first * ctypes.sizeof(LayerSpec)), ctypes.POINTER(LayerSpec))


def context_table(context: Optional[Context], new_slots: torch.Tensor) -> torch.Tensor:
    """Slots [seqs, width] of the keys from position 0: a prefill's context (None: its own new slots),
    or a decode step's slot table / slot range."""
    if context is None:
        return new_slots.view(1, -1)
    if isinstance(context, slice):
        return torch.arange(context.start, context.stop, dtype=torch.int64).view(1, -1)
    return context.view(-1, context.shape[-1]) if context.dim() > 1 else context.view(1, -1)

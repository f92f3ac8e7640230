"""The Llama family's parts of :class:`kvgate.models.kv_runtime.KVRuntime`: a pool of every layer's
K and V, and the Llama forward over it.

Exported state layout (private to the family, guarded by its fingerprint): the raw bytes of a
tensor ``[layers, 2 (k/v), tokens, kv_heads, head_dim]`` in the runtime dtype, C order, in the chunk
framing of :mod:`kvgate.models.chunk_frames` with no auxiliary state. Families whose layers are
Llama's (Qwen3, Qwen3-MoE, GLM-4.5, MiniMax M2) reuse these parts under their own state name.
"""

from __future__ import annotations

import attrs

from kvgate.models.kv_pool import KVPool
from kvgate.models.kv_runtime import RuntimeParts
from kvgate.models.llama.forward import LlamaForward
from kvgate.models.llama.layers import LlamaArch, LlamaWeights
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.rope import Rotary


def llama_pool(arch: LlamaArch, block_size: int, tokens: int, dtype, device) -> KVPool:
    return KVPool(arch.layers, arch.kv_heads, arch.head_dim, block_size, tokens, dtype, device)


def llama_forward(arch: LlamaArch, weights: LlamaWeights, pool: KVPool, max_context: int,
                  deterministic: bool, qk_norm_over_projection: bool = False) -> LlamaForward:
    dtype, device = weights.embed.dtype, weights.embed.device
    rotary = Rotary(arch.rotary_dim or arch.head_dim, arch.rope_theta, arch.rope_scaling, dtype, device,
                    initial_positions=min(max_context, 8192))
    return LlamaForward(arch, weights, pool, rotary, fp32_attention_keys(device, dtype), deterministic,
                        qk_norm_over_projection)


def llama_shape(arch: LlamaArch, pool: KVPool) -> str:
    return f"{arch.layers}x{arch.kv_heads}x{arch.head_dim}"


LLAMA_PARTS = RuntimeParts("llama-kv/1", llama_pool, llama_forward, llama_shape)


def llama_parts(state_name: str) -> RuntimeParts:
    """The Llama parts under a family's own state name (its chunks never import into another family)."""
    return attrs.evolve(LLAMA_PARTS, state_name=state_name)

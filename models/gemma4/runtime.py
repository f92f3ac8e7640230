"""Gemma 4's parts of :class:`kvgate.models.kv_runtime.KVRuntime`: a pool shaped per layer kind and
Gemma 4's forward over it.

Exported state layout (private to this family, guarded by its fingerprint): per token range, for
each distinct layer shape in turn (:class:`ShapedKVPool`), the raw bytes of ``[layers of that shape,
2 (k/v), tokens, kv_heads, head_dim]`` in the runtime dtype, C order; only layers that write K/V
(a KV-shared layer has none). Chunks carry no auxiliary state.
"""

from __future__ import annotations

from kvgate.models.gemma4.arch import ARCHITECTURES, Gemma4Arch
from kvgate.models.gemma4.forward import Gemma4Forward
from kvgate.models.gemma4.pool import ShapedKVPool
from kvgate.models.gemma4.rotary import Rotaries
from kvgate.models.gemma4.weights import Gemma4Weights, read_weights
from kvgate.models.kv_runtime import RuntimeParts, kv_runtime
from kvgate.models.loading import Family


def gemma4_pool(arch: Gemma4Arch, block_size: int, tokens: int, dtype, device) -> ShapedKVPool:
    shapes = [(arch.kv_heads[i], arch.head_dims[i]) for i in range(arch.layers) if arch.cached(i)]
    return ShapedKVPool(shapes, block_size, tokens, dtype, device)


def gemma4_forward(arch: Gemma4Arch, weights: Gemma4Weights, pool: ShapedKVPool, max_context: int,
                   deterministic: bool) -> Gemma4Forward:
    rotary = Rotaries(arch, weights.embed.dtype, weights.embed.device, initial_positions=min(max_context, 8192))
    return Gemma4Forward(arch, weights, pool, rotary, deterministic)


def gemma4_shape(arch: Gemma4Arch, pool: ShapedKVPool) -> str:
    return " ".join(f"{s.shape[0]}x{s.shape[3]}x{s.shape[4]}" for s in pool.storages)


def on_cpu(weights: Gemma4Weights) -> bool:
    """The invariant path runs on CPU (the windowed invariant attention is CPU's flash kernel), the
    MoE block's experts included (row-invariant products, an expert-order sum per token)."""
    return weights.embed.device.type == "cpu"


GEMMA4_PARTS = RuntimeParts("gemma4-kv/1", gemma4_pool, gemma4_forward, gemma4_shape, on_cpu)

GEMMA4 = Family("Gemma 4", set(ARCHITECTURES), Gemma4Arch.from_hf_config, kv_runtime(GEMMA4_PARTS), read_weights)

"""DeepSeek V3's parts of :class:`kvgate.models.kv_runtime.KVRuntime`: a pool of MLA's latent cache
and the MLA forward over it (products, absorbed attention and experts invariant in the
deterministic mode).

Exported state: the raw bytes of ``[layers, 1, tokens, 1, kv_lora_rank + rope_dim]`` in the runtime
dtype (the latent and rotated key of each token and layer), with no auxiliary state.
"""

from __future__ import annotations

from kvgate.models.deepseek_v3.arch import ARCHITECTURES, DeepseekArch
from kvgate.models.deepseek_v3.forward import MlaForward
from kvgate.models.deepseek_v3.weights import DeepseekWeights
from kvgate.models.kv_pool import KVPool
from kvgate.models.kv_runtime import RuntimeParts, kv_runtime
from kvgate.models.loading import Family
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.rope import Rotary


def latent_pool(arch: DeepseekArch, block_size: int, tokens: int, dtype, device) -> KVPool:
    """One row per token and layer: the latent and the rotated key."""
    return KVPool(arch.layers, 1, arch.latent_dim, block_size, tokens, dtype, device, parts=1)


def mla_forward(arch: DeepseekArch, weights: DeepseekWeights, pool: KVPool, max_context: int,
                deterministic: bool, forward_class: type = MlaForward) -> MlaForward:
    """The MLA forward (or V3.2's indexed one, ``forward_class``) over the latent pool."""
    device, dtype = weights.embed.device, weights.embed.dtype
    rotary = Rotary(arch.rope_dim, arch.rope_theta, arch.rope_scaling, dtype, device,
                    initial_positions=min(max_context, 8192))
    return forward_class(arch, weights, pool, rotary, fp32_attention_keys(device, dtype), deterministic)


def mla_shape(arch: DeepseekArch, pool: KVPool) -> str:
    return f"{arch.layers}x({arch.kv_lora_rank}+{arch.rope_dim})"


DEEPSEEK_V3_PARTS = RuntimeParts("mla-latent/1", latent_pool, mla_forward, mla_shape)

DEEPSEEK_V3 = Family("DeepSeek V3", {*ARCHITECTURES, "deepseek2"}, DeepseekArch.from_hf_config,
                     kv_runtime(DEEPSEEK_V3_PARTS), DeepseekWeights.from_hf_tensors)

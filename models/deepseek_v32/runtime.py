"""DeepSeek V3.2's parts of :class:`kvgate.models.kv_runtime.KVRuntime`: V3's latent cache with the
indexer key in each token's row, and the indexed MLA forward (the indexer's scores, its top-k and
the attention over the selection invariant in the deterministic mode).

Exported state: the raw bytes of ``[layers, 1, tokens, 1, kv_lora_rank + rope_dim + index_dim]`` in
the runtime dtype (the latent, rotated key and indexer key of each token and layer), with no
auxiliary state; its state format names the indexer width, so V3's chunks never import here.
"""

from __future__ import annotations

import functools

from kvgate.models.deepseek_v3.runtime import mla_forward
from kvgate.models.deepseek_v32 import weights
from kvgate.models.deepseek_v32.arch import ARCHITECTURES, DeepseekV32Arch
from kvgate.models.deepseek_v32.forward import IndexedMlaForward
from kvgate.models.kv_pool import KVPool
from kvgate.models.kv_runtime import RuntimeParts, kv_runtime
from kvgate.models.loading import Family


def indexed_pool(arch: DeepseekV32Arch, block_size: int, tokens: int, dtype, device) -> KVPool:
    return KVPool(arch.layers, 1, arch.cached_dim, block_size, tokens, dtype, device, parts=1)


def indexed_shape(arch: DeepseekV32Arch, pool: KVPool) -> str:
    return f"{arch.layers}x({arch.kv_lora_rank}+{arch.rope_dim}+{arch.index_dim}) top{arch.index_topk}"


DEEPSEEK_V32_PARTS = RuntimeParts("mla-latent-indexed/1", indexed_pool,
                                  functools.partial(mla_forward, forward_class=IndexedMlaForward), indexed_shape)

DEEPSEEK_V32 = Family("DeepSeek V3.2", set(ARCHITECTURES), DeepseekV32Arch.from_hf_config,
                      kv_runtime(DEEPSEEK_V32_PARTS), weights.from_hf_tensors)

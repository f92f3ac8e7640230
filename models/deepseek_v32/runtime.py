"""DeepseekV32Runtime: DeepSeek V3's runtime with the indexer key in each token's cached state.

Exported state: the raw bytes of ``[layers, 1, tokens, 1, kv_lora_rank + rope_dim + index_dim]`` in
the runtime dtype (the latent, rotated key and indexer key of each token and layer), in the Llama
chunk framing; its :attr:`state_format` names the indexer width, so V3's chunks never import here.
"""

from __future__ import annotations

from kvgate.models.deepseek_v3.runtime import DeepseekRuntime
from kvgate.models.deepseek_v32 import weights
from kvgate.models.deepseek_v32.arch import ARCHITECTURES, DeepseekV32Arch
from kvgate.models.deepseek_v32.forward import IndexedMlaForward
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.loading import Family
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.rope import Rotary


class DeepseekV32Runtime(DeepseekRuntime):
    STATE_NAME = "mla-latent-indexed/1"

    def invariant_arithmetic(self) -> bool:
        """V3's, plus the indexer's scores, its top-k and the attention over the selection
        (:class:`IndexedMlaForward`'s deterministic mode)."""
        return True

    def new_pool(self, kv_pool_tokens: int) -> KVPool:
        return KVPool(self.arch.layers, 1, self.arch.cached_dim, self.block_size, kv_pool_tokens, self.dtype,
                      self.device, parts=1)

    def new_forward(self) -> IndexedMlaForward:
        arch = self.arch
        rotary = Rotary(arch.rope_dim, arch.rope_theta, arch.rope_scaling, self.dtype, self.device,
                        initial_positions=min(self.info.max_context, 8192))
        return IndexedMlaForward(arch, self.weights, self.pool, rotary, fp32_attention_keys(self.device, self.dtype),
                                 self.deterministic)

    @property
    def state_format(self) -> str:
        arch, dtype = self.arch, str(self.dtype).removeprefix("torch.")
        return (f"{self.STATE_NAME} {dtype} {arch.layers}x({arch.kv_lora_rank}+{arch.rope_dim}+{arch.index_dim})"
                f" top{arch.index_topk}")


DEEPSEEK_V32 = Family("DeepSeek V3.2", set(ARCHITECTURES), DeepseekV32Arch.from_hf_config, DeepseekV32Runtime,
                      weights.from_hf_tensors)

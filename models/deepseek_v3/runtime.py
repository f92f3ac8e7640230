"""DeepseekRuntime: the Llama runtime's sessions, block tables and chunks over MLA's latent cache.

Exported state: the raw bytes of ``[layers, 1, tokens, 1, kv_lora_rank + rope_dim]`` in the runtime
dtype (the latent and rotated key of each token and layer), in the Llama chunk framing.
"""

from __future__ import annotations

from kvgate.models.deepseek_v3.arch import ARCHITECTURES, DeepseekArch
from kvgate.models.deepseek_v3.forward import MlaForward
from kvgate.models.deepseek_v3.weights import DeepseekWeights
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.rope import Rotary


class DeepseekRuntime(LlamaRuntime):
    STATE_NAME = "mla-latent/1"

    def invariant_arithmetic(self) -> bool:
        """MLA's products, absorbed attention and experts (:class:`MlaForward`'s deterministic mode)."""
        return True

    def new_pool(self, kv_pool_tokens: int) -> KVPool:
        return KVPool(self.arch.layers, 1, self.arch.latent_dim, self.block_size, kv_pool_tokens, self.dtype,
                      self.device, parts=1)

    def new_forward(self) -> MlaForward:
        arch = self.arch
        rotary = Rotary(arch.rope_dim, arch.rope_theta, arch.rope_scaling, self.dtype, self.device,
                        initial_positions=min(self.info.max_context, 8192))
        return MlaForward(arch, self.weights, self.pool, rotary, fp32_attention_keys(self.device, self.dtype),
                          self.deterministic)

    @property
    def state_format(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.STATE_NAME} {dtype} {self.arch.layers}x({self.arch.kv_lora_rank}+{self.arch.rope_dim})"


DEEPSEEK_V3 = Family("DeepSeek V3", {*ARCHITECTURES, "deepseek2"}, DeepseekArch.from_hf_config, DeepseekRuntime,
                     DeepseekWeights.from_hf_tensors)

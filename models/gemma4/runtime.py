"""Gemma4Runtime: the Llama runtime's block tables, sessions and chunk framing over Gemma 4's forward.

Exported state layout (private to this runtime, guarded by its fingerprint): per token range, for
each distinct layer shape in turn (:class:`ShapedKVPool`), the raw bytes of ``[layers of that shape,
2 (k/v), tokens, kv_heads, head_dim]`` in the runtime dtype, C order; only layers that write K/V
(a KV-shared layer has none). Chunks are the Llama framing with no auxiliary state.
"""

from __future__ import annotations


import torch

from kvgate.models.gemma4.arch import ARCHITECTURES, Gemma4Arch
from kvgate.models.gemma4.forward import Gemma4Forward
from kvgate.models.gemma4.pool import ShapedKVPool
from kvgate.models.gemma4.rotary import Rotaries
from kvgate.models.gemma4.weights import read_weights
from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime


class Gemma4Runtime(LlamaRuntime):
    STATE_NAME = "gemma4-kv/1"

    def invariant_arithmetic(self) -> bool:
        """On CPU (the windowed invariant attention is CPU's flash kernel), the MoE block's experts
        included (row-invariant products, an expert-order sum per token)."""
        return self.weights.embed.device.type == "cpu"

    def new_pool(self, kv_pool_tokens: int) -> ShapedKVPool:
        arch = self.arch
        shapes = [(arch.kv_heads[i], arch.head_dims[i]) for i in range(arch.layers) if arch.cached(i)]
        return ShapedKVPool(shapes, self.block_size, kv_pool_tokens, self.dtype, self.device)

    def new_forward(self) -> Gemma4Forward:
        rotary = Rotaries(self.arch, self.dtype, self.device, initial_positions=min(self.info.max_context, 8192))
        return Gemma4Forward(self.arch, self.weights, self.pool, rotary, self.deterministic)

    @property
    def state_format(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        shapes = " ".join(f"{s.shape[0]}x{s.shape[3]}x{s.shape[4]}" for s in self.pool.storages)
        return f"{self.STATE_NAME} {dtype} {shapes}"

    def _imported_state(self, raw: torch.Tensor, count: int) -> torch.Tensor:
        """The shaped pool writes exported bytes as they are (:class:`ShapedKVPool`)."""
        return raw


GEMMA4 = Family("Gemma 4", set(ARCHITECTURES), Gemma4Arch.from_hf_config, Gemma4Runtime, read_weights)

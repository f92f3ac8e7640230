"""gpt-oss's parts of :class:`kvgate.models.kv_runtime.KVRuntime`: the Llama pool and gpt-oss's forward.

The pool keeps every layer's K/V of every token, sliding layers included (their attention masks
what lies outside the window), so the state is the Llama layout under its own name and forks,
truncations and chunk export/import are exact at any token. With ``engine.deterministic`` (the
default) the runtime's decode hands the forward whole padded key blocks, as for Llama; the forward's
deterministic mode has row-invariant products and experts, tiled attention with the window and sinks.
"""

from __future__ import annotations

import attrs

from kvgate.models.gpt_oss.arch import NAMES, GptOssArch
from kvgate.models.gpt_oss.forward import GptOssForward
from kvgate.models.gpt_oss.weights import GptOssWeights, read_weights
from kvgate.models.kv_pool import KVPool
from kvgate.models.kv_runtime import kv_runtime
from kvgate.models.llama.runtime import LLAMA_PARTS
from kvgate.models.loading import Family
from kvgate.models.rope import Rotary


def gpt_oss_forward(arch: GptOssArch, weights: GptOssWeights, pool: KVPool, max_context: int,
                    deterministic: bool) -> GptOssForward:
    dtype, device = weights.embed.dtype, weights.embed.device
    rotary = Rotary(arch.head_dim, arch.rope_theta, arch.rope_scaling, dtype, device,
                    initial_positions=min(max_context, 8192))
    return GptOssForward(arch, weights, pool, rotary, deterministic)


GPT_OSS_PARTS = attrs.evolve(LLAMA_PARTS, state_name="gpt_oss-kv/1", new_forward=gpt_oss_forward)

GPT_OSS = Family("gpt-oss", set(NAMES), GptOssArch.from_hf_config, kv_runtime(GPT_OSS_PARTS), read_weights)

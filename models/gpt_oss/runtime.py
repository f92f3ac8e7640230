"""GptOssRuntime: the Llama runtime's sessions, block tables and chunks over gpt-oss's forward.

The pool keeps every layer's K/V of every token, sliding layers included (their attention masks
what lies outside the window), so the state is the Llama layout under its own name and forks,
truncations and chunk export/import are exact at any token. With ``engine.deterministic`` (the
default) the runtime's decode hands the forward whole padded key blocks, as the Llama runtime does.
"""

from __future__ import annotations

from kvgate.models.gpt_oss.arch import NAMES, GptOssArch
from kvgate.models.gpt_oss.forward import GptOssForward
from kvgate.models.gpt_oss.weights import read_weights
from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime
from kvgate.models.rope import Rotary


class GptOssRuntime(LlamaRuntime):
    STATE_NAME = "gpt_oss-kv/1"

    def invariant_arithmetic(self) -> bool:
        """The forward's deterministic mode: row-invariant products and experts, tiled attention with
        the window and sinks (:mod:`.forward`)."""
        return True

    def new_forward(self) -> GptOssForward:
        arch = self.arch
        rotary = Rotary(arch.head_dim, arch.rope_theta, arch.rope_scaling, self.dtype, self.device,
                        initial_positions=min(self.info.max_context, 8192))
        return GptOssForward(arch, self.weights, self.pool, rotary, self.deterministic)


GPT_OSS = Family("gpt-oss", set(NAMES), GptOssArch.from_hf_config, GptOssRuntime, read_weights)

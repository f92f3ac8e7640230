"""Plugin: the Qwen3-Next runtime (``qwen3_next``; the Qwen3.5 runtime with Qwen3-Next's fused
linear-attention projections split when read and its MoE in the layers its config names; Hugging
Face directories of ``Qwen3NextForCausalLM`` and GGUF files of llama.cpp's ``qwen3next``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a Qwen3-Next :class:`~kvgate.models.qwen3_5.runtime.Qwen35Runtime`."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3_5.runtime import QWEN3_NEXT

    return load_runtime(source, model_config, engine_config, cache_dir, QWEN3_NEXT)


SPEC = RuntimeSpec(load=load, hf_model_types=("qwen3_next",), hf_architectures=("Qwen3NextForCausalLM",),
                   gguf_architectures=("qwen3next",))


@hookimpl
def register_model_runtimes(register):
    register("qwen3_next", SPEC)

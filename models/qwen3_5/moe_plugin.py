"""Plugin: the Qwen3.5-MoE runtime (``qwen3_5_moe``; the Qwen3.5 runtime with routed experts and a
gated shared expert in every layer; Hugging Face directories and GGUF files of llama.cpp's
``qwen35moe``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a Qwen3.5-MoE :class:`~kvgate.models.qwen3_5.runtime.Qwen35Runtime`."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3_5.runtime import QWEN3_5_MOE

    return load_runtime(source, model_config, engine_config, cache_dir, QWEN3_5_MOE)


SPEC = RuntimeSpec(load=load, hf_model_types=("qwen3_5_moe_text", "qwen3_5_moe"),
                   hf_architectures=("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
                   gguf_architectures=("qwen35moe",))


@hookimpl
def register_model_runtimes(register):
    register("qwen3_5_moe", SPEC)

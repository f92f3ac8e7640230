"""Plugin: the Qwen3.5 runtime (``qwen3_5``; Hugging Face directories of ``Qwen3_5ForCausalLM`` or,
its language model only, ``Qwen3_5ForConditionalGeneration``; GGUF files of llama.cpp's ``qwen35``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a :class:`~kvgate.models.qwen3_5.runtime.Qwen35Runtime`."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3_5.runtime import QWEN3_5

    return load_runtime(source, model_config, engine_config, cache_dir, QWEN3_5)


SPEC = RuntimeSpec(load=load, hf_model_types=("qwen3_5_text", "qwen3_5"),
                   hf_architectures=("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"), gguf_architectures=("qwen35",))


@hookimpl
def register_model_runtimes(register):
    register("qwen3_5", SPEC)

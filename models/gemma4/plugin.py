"""Plugin: the Gemma 4 text runtime (``gemma4``; Hugging Face directories of ``Gemma4ForCausalLM`` or,
its language model only, ``Gemma4ForConditionalGeneration``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a Gemma 4 model (:data:`~kvgate.models.gemma4.runtime.GEMMA4`)."""
    from kvgate.models.gemma4.runtime import GEMMA4
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, GEMMA4)


SPEC = RuntimeSpec(load=load, hf_model_types=("gemma4_text", "gemma4"),
                   hf_architectures=("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), gguf_architectures=())


@hookimpl
def register_model_runtimes(register):
    register("gemma4", SPEC)

"""Plugin: the Llama-family runtime, which also serves Qwen2 (the same layers plus q/k/v biases)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a :class:`~kvgate.models.kv_runtime.KVRuntime` with the Llama parts (see :mod:`kvgate.models.loading`)."""
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir)


def preview(source):
    """The source's architecture and chat template, no tensors (see :mod:`kvgate.models.llama.preview`)."""
    from kvgate.models.llama.preview import preview_source

    return preview_source(source)


SPEC = RuntimeSpec(load=load, hf_model_types=("llama", "qwen2"),
                   hf_architectures=("LlamaForCausalLM", "Qwen2ForCausalLM"), gguf_architectures=("llama", "qwen2"),
                   preview=preview)


@hookimpl
def register_model_runtimes(register):
    register("llama", SPEC)

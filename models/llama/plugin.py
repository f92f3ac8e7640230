"""Plugin: registers the Llama-family runtime for the ``llama`` and ``qwen2`` architectures."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl


def load(source, model_config, engine_config, cache_dir):
    """Load a :class:`kvgate.models.llama.LlamaRuntime` (see :func:`kvgate.models.loading.load_runtime`)."""
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir)


@hookimpl
def register_model_runtimes(register):
    for name in ("llama", "qwen2", "LlamaForCausalLM", "Qwen2ForCausalLM"):
        register(name, load)

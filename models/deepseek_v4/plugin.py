"""Plugin: the DeepSeek V4 runtime (``deepseek_v4``; Hugging Face directories only, see the package)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a :class:`~kvgate.models.deepseek_v4.runtime.DeepseekV4Runtime`."""
    from kvgate.models.deepseek_v4.runtime import DEEPSEEK_V4
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, DEEPSEEK_V4)


SPEC = RuntimeSpec(load=load, hf_model_types=("deepseek_v4",), hf_architectures=("DeepseekV4ForCausalLM",),
                   gguf_architectures=())


@hookimpl
def register_model_runtimes(register):
    register("deepseek_v4", SPEC)

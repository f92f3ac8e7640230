"""Plugin: the DeepSeek V3.2 runtime (``deepseek_v32``; Hugging Face directories only, see the package)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a DeepSeek V3.2 model (:data:`~kvgate.models.deepseek_v32.runtime.DEEPSEEK_V32`)."""
    from kvgate.models.deepseek_v32.runtime import DEEPSEEK_V32
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, DEEPSEEK_V32)


SPEC = RuntimeSpec(load=load, hf_model_types=("deepseek_v32",), hf_architectures=("DeepseekV32ForCausalLM",),
                   gguf_architectures=())


@hookimpl
def register_model_runtimes(register):
    register("deepseek_v32", SPEC)

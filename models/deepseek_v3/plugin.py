"""Plugin: the DeepSeek V3 runtime (``deepseek_v3``, also Kimi K2's ``kimi_k2``; GGUF ``deepseek2``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a DeepSeek V3 model (:data:`~kvgate.models.deepseek_v3.runtime.DEEPSEEK_V3`)."""
    from kvgate.models.deepseek_v3.runtime import DEEPSEEK_V3
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, DEEPSEEK_V3)


SPEC = RuntimeSpec(load=load, hf_model_types=("deepseek_v3", "kimi_k2"), hf_architectures=("DeepseekV3ForCausalLM",),
                   gguf_architectures=("deepseek2",))


@hookimpl
def register_model_runtimes(register):
    register("deepseek_v3", SPEC)

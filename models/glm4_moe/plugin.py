"""Plugin: the GLM-4.5 / 4.6 / 4.7 runtime (``glm4_moe``)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a GLM-4.5 model (:data:`~kvgate.models.glm4_moe.family.GLM4_MOE`) from an HF directory or a GGUF."""
    from kvgate.models.glm4_moe.family import GLM4_MOE
    from kvgate.models.loading import load_runtime

    return load_runtime(source, model_config, engine_config, cache_dir, GLM4_MOE)


SPEC = RuntimeSpec(load=load, hf_model_types=("glm4_moe",), hf_architectures=("Glm4MoeForCausalLM",),
                   gguf_architectures=("glm4moe",))


@hookimpl
def register_model_runtimes(register):
    register("glm4_moe", SPEC)

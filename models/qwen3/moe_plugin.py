"""Plugin: the Qwen3-MoE runtime (Qwen3 attention, softmax-routed experts in the sparse layers)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a Qwen3-MoE model (:data:`~kvgate.models.qwen3.families.QWEN3_MOE`) from an HF directory or a GGUF."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3.families import QWEN3_MOE

    return load_runtime(source, model_config, engine_config, cache_dir, QWEN3_MOE)


SPEC = RuntimeSpec(load=load, hf_model_types=("qwen3_moe",), hf_architectures=("Qwen3MoeForCausalLM",),
                   gguf_architectures=("qwen3moe",))


@hookimpl
def register_model_runtimes(register):
    register("qwen3_moe", SPEC)

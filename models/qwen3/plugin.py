"""Plugin: the Qwen3 runtime (dense Qwen3: Llama layers with per-head q/k RMSNorm)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a Qwen3 model (:data:`~kvgate.models.qwen3.families.QWEN3`) from an HF directory or a GGUF."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3.families import QWEN3

    return load_runtime(source, model_config, engine_config, cache_dir, QWEN3)


SPEC = RuntimeSpec(load=load, hf_model_types=("qwen3",), hf_architectures=("Qwen3ForCausalLM",),
                   gguf_architectures=("qwen3",))


@hookimpl
def register_model_runtimes(register):
    register("qwen3", SPEC)

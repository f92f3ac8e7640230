"""MiniMax M2 (``minimax_m2``): its names, architecture and weights, served by the Llama parts with
q and k RMS-normalised over their whole projections (all heads together) before the partial RoPE;
batch- and split-invariant in the deterministic mode, experts included; its chunks are the Llama
layout under their own name."""

from __future__ import annotations

import functools

import attrs

from kvgate.models.kv_runtime import kv_runtime
from kvgate.models.llama.runtime import LLAMA_PARTS, llama_forward
from kvgate.models.loading import Family
from kvgate.models.minimax_m2.arch import MINIMAX_M2_NAMES, minimax_m2_arch
from kvgate.models.minimax_m2.weights import minimax_m2_weights

MINIMAX_M2_PARTS = attrs.evolve(LLAMA_PARTS, state_name="minimax-m2-kv/1",
                                new_forward=functools.partial(llama_forward, qk_norm_over_projection=True))

MINIMAX_M2 = Family("MiniMax M2", set(MINIMAX_M2_NAMES), minimax_m2_arch, kv_runtime(MINIMAX_M2_PARTS),
                    minimax_m2_weights)

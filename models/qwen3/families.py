"""Qwen3 and Qwen3-MoE: their names and architectures, served by the Llama parts under their own state name."""

from __future__ import annotations

from typing import Any

import attrs

from kvgate.models.llama.layers import LlamaArch
from kvgate.models.kv_runtime import kv_runtime
from kvgate.models.llama.runtime import llama_parts
from kvgate.models.loading import Family
from kvgate.models.moe.config import moe_from_hf_config

QWEN3_NAMES = {"qwen3": "qwen3", "Qwen3ForCausalLM": "qwen3"}
QWEN3_MOE_NAMES = {"qwen3_moe": "qwen3_moe", "Qwen3MoeForCausalLM": "qwen3_moe"}

QWEN3_PARTS = llama_parts("qwen3-kv/1")  # the Llama chunk layout under Qwen3's name, both families


def _full_attention(config: dict[str, Any]) -> None:
    if config.get("use_sliding_window"):
        raise ValueError("Qwen3 models with use_sliding_window are not supported (every layer attends to all)")


def qwen3_arch(config: dict[str, Any]) -> LlamaArch:
    """Qwen3: Llama layers, no q/k/v bias unless ``attention_bias``, RMSNorm on each q and k head."""
    _full_attention(config)
    return attrs.evolve(LlamaArch.from_hf_config(config, QWEN3_NAMES), qk_norm=True)


def qwen3_moe_arch(config: dict[str, Any]) -> LlamaArch:
    """Qwen3-MoE: Qwen3 attention; sparse layers run softmax top-k experts (``norm_topk_prob``
    renormalises), the layers in ``mlp_only_layers`` or off ``decoder_sparse_step`` stay dense."""
    _full_attention(config)
    arch = attrs.evolve(LlamaArch.from_hf_config(config, QWEN3_MOE_NAMES), qk_norm=True)
    return attrs.evolve(arch, moe=moe_from_hf_config(config, arch.layers, scoring="softmax"))


QWEN3 = Family("Qwen3", {*QWEN3_NAMES, "qwen3"}, qwen3_arch, kv_runtime(QWEN3_PARTS))
QWEN3_MOE = Family("Qwen3-MoE", {*QWEN3_MOE_NAMES, "qwen3moe"}, qwen3_moe_arch, kv_runtime(QWEN3_PARTS))

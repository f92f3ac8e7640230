"""GLM-4.5 (``glm4_moe``): its names and architecture, served by the Llama parts under its own state
name; with ``[engine] speculative = "mtp"`` its MTP layer (``num_nextn_predict_layers``) drafts."""

from __future__ import annotations

from typing import Any

import attrs

from kvgate.models.kv_runtime import kv_runtime
from kvgate.models.llama.layers import LlamaArch
from kvgate.models.llama.runtime import llama_parts
from kvgate.models.loading import Family
from kvgate.models.moe.config import moe_from_hf_config
from kvgate.models.mtp.weights import mtp_weights_from_hf

GLM4_MOE_NAMES = {"glm4_moe": "glm4_moe", "Glm4MoeForCausalLM": "glm4_moe"}

GLM4_MOE_PARTS = llama_parts("glm4moe-kv/1")


def glm4_moe_arch(config: dict[str, Any]) -> LlamaArch:
    """GLM-4.5: q/k/v biases with ``attention_bias`` (never an o bias), RoPE on the first
    ``partial_rotary_factor`` of each head, q/k norms with ``use_qk_norm``, dense layers before
    ``first_k_dense_replace``, then sigmoid-routed experts plus shared experts."""
    arch = LlamaArch.from_hf_config(config, GLM4_MOE_NAMES)
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    factor = float(config.get("partial_rotary_factor") or rope.get("partial_rotary_factor") or 1.0)
    rotary = int(arch.head_dim * factor)
    if rotary % 2 or not 0 < rotary <= arch.head_dim:
        raise ValueError(f"bad GLM config.json: partial_rotary_factor {factor} of head_dim {arch.head_dim}")
    return attrs.evolve(arch, o_bias=False, qk_norm=bool(config.get("use_qk_norm", False)), rotary_dim=rotary,
                        moe=moe_from_hf_config(config, arch.layers, scoring="sigmoid"))


GLM4_MOE = Family("GLM-4.5", {*GLM4_MOE_NAMES, "glm4moe"}, glm4_moe_arch, kv_runtime(GLM4_MOE_PARTS),
                  draft_weights=mtp_weights_from_hf)

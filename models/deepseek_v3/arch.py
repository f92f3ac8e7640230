"""The DeepSeek V3 architecture, read from a Hugging Face ``config.json``."""

from __future__ import annotations

import math
from typing import Any, Optional

import attrs

from kvgate.models.moe.config import MoeConfig, moe_from_hf_config

ARCHITECTURES = {"deepseek_v3": "deepseek_v3", "kimi_k2": "deepseek_v3", "DeepseekV3ForCausalLM": "deepseek_v3"}


@attrs.define
class DeepseekArch:
    """MLA sizes: queries through a rank ``q_lora_rank`` bottleneck (None: one projection), keys and
    values from a ``kv_lora_rank`` latent; each head's query/key has ``nope_dim`` latent-derived and
    ``rope_dim`` rotated dims (the rotated key is shared by all heads), its value ``v_dim``."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    q_lora_rank: Optional[int]
    kv_lora_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Optional[dict[str, Any]]
    rope_interleave: bool
    trained_context: int
    tie_embeddings: bool
    moe: MoeConfig

    @property
    def latent_dim(self) -> int:
        """Cached dims per token and layer: the latent, then the rotated key."""
        return self.kv_lora_rank + self.rope_dim

    @property
    def softmax_scale(self) -> float:
        """1/sqrt(query dims), times YaRN's ``mscale_all_dim`` correction squared when scaled."""
        scale = (self.nope_dim + self.rope_dim) ** -0.5
        rope = self.rope_scaling or {}
        factor, mscale = float(rope.get("factor") or 1.0), float(rope.get("mscale_all_dim") or 0.0)
        if mscale and factor > 1:
            scale *= (0.1 * mscale * math.log(factor) + 1.0) ** 2
        return scale

    def sparse(self, index: int) -> bool:
        return index in self.moe.sparse_layers

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "DeepseekArch":
        check_names(config, ARCHITECTURES, "DeepSeek V3")
        return cls(**mla_fields(config, "deepseek_v3", "DeepSeek V3"))


def check_names(config: dict[str, Any], known, family: str) -> None:
    names = [config.get("model_type", "")] + list(config.get("architectures") or [])
    if not any(n in known for n in names):
        raise ValueError(f"not a {family} model (model_type/architectures: {names})")


def mla_fields(config: dict[str, Any], architecture: str, family: str) -> dict[str, Any]:
    """The :class:`DeepseekArch` fields of an MLA ``config.json`` (shared with DeepSeek V3.2)."""
    if config.get("attention_bias"):
        raise ValueError(f"{family} models with attention_bias are not supported")
    try:
        rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
        theta = float(config.get("rope_theta") or rope.get("rope_theta") or 10000.0)
        if (rope.get("rope_type") or rope.get("type") or "default") == "default":
            rope = {}
        layers = int(config["num_hidden_layers"])
        return dict(
            architecture=architecture, vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]), intermediate_size=int(config["intermediate_size"]),
            layers=layers, heads=int(config["num_attention_heads"]),
            q_lora_rank=int(config["q_lora_rank"]) if config.get("q_lora_rank") else None,
            kv_lora_rank=int(config["kv_lora_rank"]), nope_dim=int(config["qk_nope_head_dim"]),
            rope_dim=int(config["qk_rope_head_dim"]), v_dim=int(config["v_head_dim"]),
            rms_eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=rope or None,
            rope_interleave=bool(config.get("rope_interleave", True)),
            trained_context=int(config.get("max_position_embeddings", 4096)),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            moe=moe_from_hf_config(config, layers, scoring=config.get("scoring_func") or "sigmoid"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad {family} config.json: {exc!r}") from None

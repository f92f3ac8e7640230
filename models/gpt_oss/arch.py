"""What one gpt-oss model is, read from its Hugging Face ``config.json``."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.models.moe.config import MoeConfig
from kvgate.models.rope_scaling import declared_scaling

NAMES = {"gpt_oss": "gpt_oss", "GptOssForCausalLM": "gpt_oss"}
LAYER_TYPES = {"sliding_attention": True, "full_attention": False}


@attrs.define
class GptOssArch:
    """``sliding[i]``: layer i attends to its last ``sliding_window`` tokens only (itself included);
    the others attend to the whole context. The experts compute ``(up + 1) * gate * sigmoid(alpha *
    gate)`` with gate clamped above and up on both sides at ``swiglu_limit``."""

    architecture: str
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Optional[dict[str, Any]]
    trained_context: int
    tie_embeddings: bool
    attention_bias: bool
    sliding: tuple[bool, ...] = attrs.field(converter=tuple)
    sliding_window: int
    experts: int
    top_k: int
    expert_width: int
    swiglu_alpha: float
    swiglu_limit: float

    @property
    def moe(self) -> MoeConfig:
        """The router: softmax over the chosen top-k logits (= the full softmax renormalised over them)."""
        return MoeConfig(experts=self.experts, top_k=self.top_k, intermediate_size=self.expert_width,
                         sparse_layers=range(self.layers), scoring="softmax", norm_topk_prob=True)

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "GptOssArch":
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        if not any(n in NAMES for n in names):
            raise ValueError(f"not a gpt-oss model (model_type/architectures: {names})")
        try:
            arch = cls(**_fields(config))
            arch.moe  # its checks: top_k within the experts
            return arch
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad gpt-oss config.json: {exc}") from None


def _fields(config: dict[str, Any]) -> dict[str, Any]:
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    trained = int(config.get("max_position_embeddings", 131072))
    sliding = _sliding_layers(config, layers)
    window = int(config.get("sliding_window") or 0)
    if any(sliding) and window <= 0:
        raise ValueError(f"sliding_window must be a positive number of tokens, got {config.get('sliding_window')!r}")
    return dict(
        architecture="gpt_oss", vocab_size=int(config["vocab_size"]), hidden_size=hidden, layers=layers, heads=heads,
        kv_heads=kv_heads, head_dim=int(config.get("head_dim") or hidden // heads),
        rms_eps=float(config.get("rms_norm_eps", 1e-5)),
        rope_theta=float(config.get("rope_theta") or rope.get("rope_theta") or 150000.0),
        rope_scaling=declared_scaling(rope, trained), trained_context=trained,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", True)), sliding=sliding, sliding_window=window,
        experts=int(config["num_local_experts"]), top_k=int(config["num_experts_per_tok"]),
        expert_width=int(config["intermediate_size"]), swiglu_alpha=float(config.get("swiglu_alpha", 1.702)),
        swiglu_limit=float(config.get("swiglu_limit", 7.0)))


def _sliding_layers(config: dict[str, Any], layers: int) -> tuple[bool, ...]:
    """``layer_types``, or transformers' default: even layers sliding, odd layers full."""
    types = config.get("layer_types")
    if types is None:
        return tuple(i % 2 == 0 for i in range(layers))
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"layer_types must list {layers} of {sorted(LAYER_TYPES)}, got {types!r}")
    return tuple(LAYER_TYPES[t] for t in types)

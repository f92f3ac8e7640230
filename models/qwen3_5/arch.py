"""The Qwen3.5, Qwen3.5-MoE and Qwen3-Next architectures, read from a Hugging Face ``config.json``: a
``Qwen3_5ForCausalLM`` / ``Qwen3_5MoeForCausalLM`` (``model_type`` ``qwen3_5_text`` /
``qwen3_5_moe_text``) or a ``...ForConditionalGeneration`` (``qwen3_5`` / ``qwen3_5_moe``), whose
language model is its ``text_config``; a ``Qwen3NextForCausalLM`` (``qwen3_next``). Qwen3.5-MoE: every
layer's MLP is a softmax-routed, renormalised top-k of experts plus a shared expert scaled by
``sigmoid`` of its own gate. Qwen3-Next: the same MoE in every ``decoder_sparse_step``-th layer but
its ``mlp_only_layers`` (those have a dense MLP), renormalised as ``norm_topk_prob`` says; its layers
compute as Qwen3.5-MoE's (its fused projections are split when read, :mod:`.weights`)."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.models.moe.config import MoeConfig, sparse_layers

ARCHITECTURES = {"qwen3_5_text": "qwen3_5", "qwen3_5": "qwen3_5", "Qwen3_5ForCausalLM": "qwen3_5",
                 "Qwen3_5ForConditionalGeneration": "qwen3_5"}
MOE_ARCHITECTURES = {"qwen3_5_moe_text": "qwen3_5_moe", "qwen3_5_moe": "qwen3_5_moe",
                     "Qwen3_5MoeForCausalLM": "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe"}
NEXT_ARCHITECTURES = {"qwen3_next": "qwen3_next", "Qwen3NextForCausalLM": "qwen3_next"}
LINEAR, FULL = "linear_attention", "full_attention"
CHUNK_SIZE = 64  # tokens per chunk of the gated delta rule, counted from position 0 (as transformers chunks)


@attrs.define
class Qwen35Arch:
    """``kinds[i]``: layer i's token mixer (linear or full attention). Full attention: ``heads`` query
    heads of ``head_dim`` (each with an output gate as wide) over ``kv_heads``, the first
    ``rotary_dim`` dims rotated. Linear attention: ``linear_k_heads`` query/key heads of
    ``linear_k_dim`` serving ``linear_v_heads`` value heads of ``linear_v_dim``, a causal depthwise
    convolution of ``conv_kernel`` taps over the q/k/v projections."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    kinds: tuple[str, ...] = attrs.field(converter=tuple)
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    linear_k_heads: int
    linear_v_heads: int
    linear_k_dim: int
    linear_v_dim: int
    conv_kernel: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Optional[dict[str, Any]]
    trained_context: int
    tie_embeddings: bool
    chunk_size: int = CHUNK_SIZE
    moe: Optional[MoeConfig] = None  # Qwen3.5-MoE, Qwen3-Next: the routed experts of its sparse layers
    shared_expert_size: int = 0  # Qwen3.5-MoE, Qwen3-Next: the gated shared expert's width

    def sparse(self, layer: int) -> bool:
        """Whether layer ``layer``'s MLP is the MoE (else a dense MLP)."""
        return self.moe is not None and layer in self.moe.sparse_layers

    @property
    def full_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.kinds) if kind == FULL]

    @property
    def linear_layers(self) -> list[int]:
        return [i for i, kind in enumerate(self.kinds) if kind == LINEAR]

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_k_heads * self.linear_k_dim + self.linear_v_heads * self.linear_v_dim

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "Qwen35Arch":
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        architecture = next((table[n] for table in (MOE_ARCHITECTURES, NEXT_ARCHITECTURES, ARCHITECTURES)
                             for n in names if n in table), None)
        if architecture is None:
            raise ValueError(f"not a Qwen3.5 or Qwen3-Next model (model_type/architectures: {names})")
        text = dict(config.get("text_config") or config)
        text.setdefault("tie_word_embeddings", config.get("tie_word_embeddings", False))
        try:
            fields = _fields(text)
            if architecture != "qwen3_5":
                fields.update(_moe_fields(text, fields["layers"], architecture))
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad {architecture} config.json: {exc!r}") from None


def _moe_fields(config: dict[str, Any], layers: int, architecture: str) -> dict[str, Any]:
    moe = MoeConfig(experts=int(config["num_experts"]), top_k=int(config["num_experts_per_tok"]),
                    intermediate_size=int(config["moe_intermediate_size"]), sparse_layers=sparse_layers(config, layers),
                    scoring="softmax", norm_topk_prob=bool(config.get("norm_topk_prob", True)))
    return dict(architecture=architecture, moe=moe, shared_expert_size=int(config["shared_expert_intermediate_size"]))


def _fields(config: dict[str, Any]) -> dict[str, Any]:
    layers = int(config["num_hidden_layers"])
    kinds = config.get("layer_types")
    if kinds is None:
        interval = int(config.get("full_attention_interval") or 4)
        kinds = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)]
    if len(kinds) < layers or any(kind not in (LINEAR, FULL) for kind in kinds[:layers]):
        raise ValueError(f"layer_types {kinds} do not name {layers} layers of {LINEAR} or {FULL}")
    if config.get("attention_bias"):
        raise ValueError("attention_bias is not supported (Qwen3.5 checkpoints have none)")
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    factor = float(rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.25)))
    rotary_dim = int(head_dim * factor)
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind != "default":
        raise ValueError(f"rope_type {kind!r} (only the default rope is supported)")
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        raise ValueError(f"rotary dims {rotary_dim} must be even and within head_dim {head_dim}")
    k_heads, v_heads = int(config["linear_num_key_heads"]), int(config["linear_num_value_heads"])
    if v_heads % k_heads:
        raise ValueError(f"linear_num_value_heads {v_heads} is not a multiple of linear_num_key_heads {k_heads}")
    if (config.get("hidden_act") or "silu") != "silu":
        raise ValueError(f"hidden_act {config.get('hidden_act')!r} (only silu is supported)")
    return dict(
        architecture="qwen3_5", vocab_size=int(config["vocab_size"]), hidden_size=hidden,
        intermediate_size=int(config.get("intermediate_size") or 0), layers=layers, kinds=kinds[:layers], heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads), head_dim=head_dim, rotary_dim=rotary_dim,
        linear_k_heads=k_heads, linear_v_heads=v_heads, linear_k_dim=int(config["linear_key_head_dim"]),
        linear_v_dim=int(config["linear_value_head_dim"]), conv_kernel=int(config.get("linear_conv_kernel_dim") or 4),
        rms_eps=float(config.get("rms_norm_eps") or 1e-6),
        rope_theta=float(rope.get("rope_theta") or config.get("rope_theta") or 10000.0), rope_scaling=None,
        trained_context=int(config.get("max_position_embeddings") or 32768),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)))

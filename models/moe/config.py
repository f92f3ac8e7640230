"""What one model's mixture of experts is: its router, its experts, and which layers are sparse."""

from __future__ import annotations

from typing import Any, Optional

import attrs

SCORINGS = ("softmax", "sigmoid")


@attrs.frozen
class MoeConfig:
    """The MoE of a model.

    ``scoring`` ``"softmax"`` (Qwen3-MoE) or ``"sigmoid"`` (DeepSeek V3, GLM-4.5: scores plus a
    per-expert correction bias choose the experts, the plain scores weigh them). With ``groups`` > 1
    the experts split into equal groups, a group scores the sum of its best two choice scores and
    only the best ``topk_groups`` groups are chosen from. ``norm_topk_prob`` renormalises the chosen
    weights to sum to 1; ``routed_scaling`` then scales them. ``shared_intermediate_size`` > 0 adds
    an always-on dense MLP of that width (the shared experts). ``sparse_layers`` are the MoE layers,
    the others are dense.
    """

    experts: int
    top_k: int
    intermediate_size: int
    sparse_layers: tuple[int, ...] = attrs.field(converter=tuple)
    scoring: str = attrs.field(default="softmax", validator=attrs.validators.in_(SCORINGS))
    norm_topk_prob: bool = False
    groups: int = 1
    topk_groups: int = 1
    routed_scaling: float = 1.0
    shared_intermediate_size: int = 0

    def __attrs_post_init__(self) -> None:
        if not 0 < self.top_k <= self.experts:
            raise ValueError(f"MoE top_k {self.top_k} must be in [1, {self.experts}] experts")
        if self.groups < 1 or self.experts % self.groups or not 0 < self.topk_groups <= self.groups:
            raise ValueError(f"MoE of {self.experts} experts cannot route over {self.groups} groups "
                             f"keeping {self.topk_groups}")
        if self.groups > 1 and self.experts // self.groups < 2:
            raise ValueError("group-limited routing needs at least 2 experts per group")


def sparse_layers(config: dict[str, Any], layers: int) -> tuple[int, ...]:
    """The MoE layers of a Hugging Face config: from ``first_k_dense_replace`` on (DeepSeek, GLM),
    every ``decoder_sparse_step``-th, minus ``mlp_only_layers`` (Qwen MoE)."""
    first = int(config.get("first_k_dense_replace") or 0)
    step = int(config.get("decoder_sparse_step") or 1)
    dense = {int(i) for i in config.get("mlp_only_layers") or []}
    return tuple(i for i in range(first, layers) if (i + 1) % step == 0 and i not in dense)


def moe_from_hf_config(config: dict[str, Any], layers: int, scoring: Optional[str] = None) -> MoeConfig:
    """The :class:`MoeConfig` of a Hugging Face MoE ``config.json`` (Qwen3-MoE, DeepSeek V3, GLM-4.5 keys);
    ``scoring`` for a family whose config does not say (GLM-4.5 is sigmoid), else ``scoring_func``."""
    try:
        experts = int(config.get("num_experts") or config.get("num_local_experts") or config["n_routed_experts"])
        shared = int(config.get("n_shared_experts") or 0)
        moe_width = int(config["moe_intermediate_size"])
        return MoeConfig(
            experts=experts, top_k=int(config["num_experts_per_tok"]), intermediate_size=moe_width,
            sparse_layers=sparse_layers(config, layers), scoring=scoring or config.get("scoring_func") or "softmax",
            norm_topk_prob=bool(config.get("norm_topk_prob", False)), groups=int(config.get("n_group") or 1),
            topk_groups=int(config.get("topk_group") or 1),
            routed_scaling=float(config.get("routed_scaling_factor") or 1.0),
            shared_intermediate_size=moe_width * shared)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"bad MoE config.json: {exc!r}") from None

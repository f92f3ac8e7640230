"""The deterministic mode's MoE MLP (``moe_mlp(..., deterministic=True)``): each row's bits are the same
in a call of any size, where the plain MoE's are not, and its values equal the plain MoE's within
fp32 rounding (sigmoid and softmax routers, grouped routing, shared experts, odd expert widths)."""

from __future__ import annotations

import pytest
import torch

from kvgate.models.moe.config import MoeConfig
from kvgate.models.moe.experts import moe_mlp
from kvgate.models.moe.weights import MoeWeights


def invariant_moe_mlp(x, config, weights):
    return moe_mlp(x, config, weights, deterministic=True)

HIDDEN = 64
CONFIGS = {
    "minimax_like": dict(experts=6, top_k=2, intermediate_size=32, scoring="sigmoid", norm_topk_prob=True),
    "grouped_shared": dict(experts=8, top_k=3, intermediate_size=24, scoring="sigmoid", norm_topk_prob=True, groups=2,
                           topk_groups=1, routed_scaling=2.5, shared_intermediate_size=48),
    "softmax_odd_width": dict(experts=5, top_k=2, intermediate_size=7, scoring="softmax"),
}


def moe(name: str, seed: int = 0) -> tuple[MoeConfig, MoeWeights, torch.Tensor]:
    config = MoeConfig(sparse_layers=(0,), **CONFIGS[name])
    g = torch.Generator().manual_seed(seed)
    e, w, s = config.experts, config.intermediate_size, config.shared_intermediate_size
    weights = MoeWeights(
        router=torch.randn(e, HIDDEN, generator=g), correction_bias=torch.randn(e, generator=g) * 0.3,
        gate_up=torch.randn(e, 2 * w, HIDDEN, generator=g) * 0.1, down=torch.randn(e, HIDDEN, w, generator=g) * 0.1,
        shared_gate_up=torch.randn(2 * s, HIDDEN, generator=g) * 0.1 if s else None,
        shared_down=torch.randn(HIDDEN, s, generator=g) * 0.1 if s else None)
    return config, weights, torch.randn(40, HIDDEN, generator=g)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_row_has_the_same_bits_in_a_call_of_any_size(name):
    config, weights, x = moe(name)
    whole = invariant_moe_mlp(x, config, weights)
    for start, end in ((0, 1), (7, 8), (0, 3), (5, 17), (3, 40), (0, 39)):
        assert torch.equal(invariant_moe_mlp(x[start:end], config, weights), whole[start:end]), (start, end)


def test_the_plain_moe_is_not_invariant_so_the_test_above_can_fail():
    config, weights, x = moe("minimax_like")
    whole = moe_mlp(x, config, weights)
    assert any(not torch.equal(moe_mlp(x[i:i + 1], config, weights)[0], whole[i]) for i in range(len(x)))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_values_equal_the_plain_moe_within_rounding(name):
    config, weights, x = moe(name, seed=1)
    assert torch.allclose(invariant_moe_mlp(x, config, weights), moe_mlp(x, config, weights), atol=1e-5, rtol=0)

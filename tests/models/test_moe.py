"""The shared MoE layer against a per-token reference written from transformers' routing semantics,
and against transformers' own DeepSeek V3 (= GLM-4.5) and Qwen3-MoE blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kvgate.models.moe.config import MoeConfig, moe_from_hf_config, sparse_layers
from kvgate.models.moe.experts import moe_mlp
from kvgate.models.moe.weights import MoeWeights

HIDDEN, WIDTH = 32, 16


def random_weights(config: MoeConfig, seed: int) -> MoeWeights:
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.3):
        return torch.randn(*shape, generator=g) * scale

    e, s = config.experts, config.shared_intermediate_size
    return MoeWeights(router=rand(e, HIDDEN, scale=1.0), correction_bias=rand(e, scale=0.5),
                      gate_up=rand(e, 2 * WIDTH, HIDDEN), down=rand(e, HIDDEN, WIDTH),
                      shared_gate_up=rand(2 * s, HIDDEN) if s else None, shared_down=rand(HIDDEN, s) if s else None)


def reference(x: torch.Tensor, config: MoeConfig, w: MoeWeights) -> torch.Tensor:
    """One token at a time, as transformers' routers and experts define it."""
    rows = []
    for token in x:
        logits = w.router @ token
        if config.scoring == "softmax":
            scores = choice = logits.softmax(-1)
        else:
            scores = logits.sigmoid()
            choice = scores + w.correction_bias
        per_group = config.experts // config.groups
        group_score = [sorted(choice[g * per_group:(g + 1) * per_group].tolist())[-2:] for g in range(config.groups)]
        best_groups = sorted(range(config.groups), key=lambda g: -sum(group_score[g]))[:config.topk_groups]
        allowed = [e for e in range(config.experts) if e // per_group in best_groups or config.groups == 1]
        chosen = sorted(allowed, key=lambda e: -choice[e].item())[:config.top_k]
        weights = torch.stack([scores[e] for e in chosen])
        if config.norm_topk_prob:
            weights = weights / weights.sum()
        weights = weights * config.routed_scaling
        out = torch.zeros(HIDDEN)
        for weight, e in zip(weights, chosen):
            gate, up = (w.gate_up[e] @ token).chunk(2)
            out += weight * (w.down[e] @ (F.silu(gate) * up))
        if w.shared_gate_up is not None:
            gate, up = (w.shared_gate_up @ token).chunk(2)
            out += w.shared_down @ (F.silu(gate) * up)
        rows.append(out)
    return torch.stack(rows)


ROUTERS = {
    "softmax": MoeConfig(experts=8, top_k=2, intermediate_size=WIDTH, sparse_layers=()),
    "softmax_renormalised": MoeConfig(experts=8, top_k=3, intermediate_size=WIDTH, sparse_layers=(),
                                      norm_topk_prob=True),
    "sigmoid_bias_scaled": MoeConfig(experts=8, top_k=2, intermediate_size=WIDTH, sparse_layers=(),
                                     scoring="sigmoid", routed_scaling=2.5),
    "sigmoid_groups_shared": MoeConfig(experts=16, top_k=4, intermediate_size=WIDTH, sparse_layers=(),
                                       scoring="sigmoid", groups=4, topk_groups=2, norm_topk_prob=True,
                                       routed_scaling=1.8, shared_intermediate_size=2 * WIDTH),
}


@pytest.mark.parametrize("name", list(ROUTERS))
def test_grouped_moe_equals_the_per_token_reference(name):
    config = ROUTERS[name]
    weights = random_weights(config, seed=len(name))
    if config.scoring == "softmax":
        weights.correction_bias = None
    x = torch.randn(11, HIDDEN, generator=torch.Generator().manual_seed(7))
    got = moe_mlp(x, config, weights)
    # fp32 sums taken in another order: within rounding of outputs as large as 41 (routed_scaling 2.5)
    assert torch.allclose(got, reference(x, config, weights), atol=1e-5, rtol=1e-5)
    for row in (0, 5, 10):  # a batch runs each expert once over its tokens: same result as one token alone
        assert torch.allclose(moe_mlp(x[row:row + 1], config, weights)[0], got[row], atol=1e-5, rtol=0)


def test_group_limit_changes_the_choice():
    """The groups configuration really restricts routing (else the test above proves little for it)."""
    limited = ROUTERS["sigmoid_groups_shared"]
    free = MoeConfig(**{**{f: getattr(limited, f) for f in ("experts", "top_k", "intermediate_size", "scoring",
                                                            "norm_topk_prob", "routed_scaling",
                                                            "shared_intermediate_size")}, "sparse_layers": ()})
    weights = random_weights(limited, seed=3)
    x = torch.randn(16, HIDDEN, generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(moe_mlp(x, limited, weights), moe_mlp(x, free, weights), atol=1e-3)


def test_matches_transformers_deepseek_v3_moe_block():
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    hf = DeepseekV3Config(hidden_size=HIDDEN, moe_intermediate_size=WIDTH, n_routed_experts=16, n_group=4,
                          topk_group=2, num_experts_per_tok=4, n_shared_experts=2, routed_scaling_factor=2.5,
                          norm_topk_prob=True, num_hidden_layers=3, first_k_dense_replace=1)
    config = moe_from_hf_config(hf.to_dict(), 3, scoring="sigmoid")  # what the DeepSeek/GLM families pass
    assert (config.scoring, config.groups, config.sparse_layers) == ("sigmoid", 4, (1, 2))
    torch.manual_seed(0)
    block = DeepseekV3MoE(hf).eval()
    with torch.no_grad():
        for param in block.parameters():
            param.normal_(0, 0.3)
        block.gate.weight.normal_(0, 1.0)
        block.gate.e_score_correction_bias.normal_(0, 0.5)
    shared = block.shared_experts
    weights = MoeWeights(router=block.gate.weight.detach(), correction_bias=block.gate.e_score_correction_bias,
                         gate_up=block.experts.gate_up_proj.detach(), down=block.experts.down_proj.detach(),
                         shared_gate_up=torch.cat([shared.gate_proj.weight, shared.up_proj.weight]).detach(),
                         shared_down=shared.down_proj.weight.detach())
    x = torch.randn(9, HIDDEN)
    with torch.no_grad():
        expected = block(x[None])[0]
    assert torch.allclose(moe_mlp(x, config, weights), expected, atol=1e-5, rtol=0)


def test_sparse_layers_and_bad_configs():
    assert sparse_layers({"first_k_dense_replace": 3}, 5) == (3, 4)
    assert sparse_layers({"decoder_sparse_step": 2, "mlp_only_layers": [3]}, 6) == (1, 5)
    assert sparse_layers({}, 3) == (0, 1, 2)
    with pytest.raises(ValueError, match="top_k"):
        MoeConfig(experts=4, top_k=5, intermediate_size=8, sparse_layers=())
    with pytest.raises(ValueError, match="groups"):
        MoeConfig(experts=6, top_k=2, intermediate_size=8, sparse_layers=(), groups=4)
    with pytest.raises(ValueError, match="bad MoE config"):
        moe_from_hf_config({"num_experts": 8}, 2)

"""The mid-size configs of bench/family_checkpoints.py, one per registered runtime family, and the
randomisation of the families whose tiny test builders do it inline (tests/models/tiny_families.py,
tiny_deepseek_v4.py) rather than in a function.

Hidden 512 throughout; real head dims (128, Gemma's 256 / 512, gpt-oss's 64); experts scaled to 32
with top-4 (DeepSeek V3's grouping 4 of 8 groups kept as 2 of 4).
"""

from __future__ import annotations

import torch

DENSE = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=2, head_dim=128, tie_word_embeddings=False)
EXPERTS = dict(num_experts_per_tok=4, moe_intermediate_size=384)
MLA = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
           q_lora_rank=192, kv_lora_rank=128, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
           n_routed_experts=32, n_group=4, topk_group=2, n_shared_experts=1, first_k_dense_replace=1,
           routed_scaling_factor=2.5, norm_topk_prob=True, tie_word_embeddings=False, **EXPERTS)
HALF_ROTARY = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
LINEAR_ATTENTION = dict(linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128,
                        linear_value_head_dim=128, linear_conv_kernel_dim=4)
HYBRID_MOE = dict(num_experts=32, shared_expert_intermediate_size=384, **EXPERTS)
V4_LAYERS = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"] * 2

FAMILIES = {
    "qwen3": DENSE,
    "qwen3_moe": dict(DENSE, num_experts=32, norm_topk_prob=True, **EXPERTS),
    "glm4_moe": dict(DENSE, attention_bias=True, rope_parameters=HALF_ROTARY, use_qk_norm=False, n_routed_experts=32,
                     n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
                     norm_topk_prob=True, **EXPERTS),
    "minimax_m2": dict(DENSE, intermediate_size=384, rotary_dim=64, num_local_experts=32, num_experts_per_tok=4),
    "gpt_oss": dict(DENSE, head_dim=64, intermediate_size=384, num_local_experts=32, num_experts_per_tok=4,
                    sliding_window=128, swiglu_limit=7.0, rope_parameters=YARN),
    "gemma4": dict(DENSE, head_dim=256, global_head_dim=512, sliding_window=512, num_hidden_layers=6,
                   layer_types=["sliding_attention"] * 5 + ["full_attention"], hidden_size_per_layer_input=0,
                   final_logit_softcapping=30.0, rms_norm_eps=1e-6, pad_token_id=0),
    "deepseek_v3": MLA,
    "deepseek_v32": dict(MLA, index_topk=256, index_head_dim=128, index_n_heads=16),
    "deepseek_v4": dict(hidden_size=512, moe_intermediate_size=384, num_hidden_layers=6, num_attention_heads=8,
                        num_key_value_heads=1, head_dim=128, qk_rope_head_dim=64, q_lora_rank=256, o_groups=2,
                        o_lora_rank=128, layer_types=V4_LAYERS, mlp_layer_types=["hash_moe"] + ["moe"] * 5,
                        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
                        sliding_window=128, index_n_heads=16, index_head_dim=64, index_topk=64,
                        n_routed_experts=32, num_experts_per_tok=4, n_shared_experts=1,
                        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}),
    "qwen3_5": dict(DENSE, **LINEAR_ATTENTION),
    "qwen3_5_moe": dict(DENSE, **LINEAR_ATTENTION, **HYBRID_MOE),
    "qwen3_next": dict(DENSE, **LINEAR_ATTENTION, **HYBRID_MOE),
}
MODEL_TYPES = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "gemma4": "gemma4_text"}
MODEL_TYPES.update({name: name for name in FAMILIES if name not in MODEL_TYPES})


def experts_of(config: dict) -> tuple[int, int]:
    """(experts per token, routed experts) of a config; (0, 0) when dense."""
    experts = config.get("num_experts") or config.get("n_routed_experts") or config.get("num_local_experts") or 0
    return (config.get("num_experts_per_tok", 0), experts)


def randomise_like_tiny_families(model) -> None:
    """tests/models/tiny_families.py's randomisation: norms, routers, biases and correction biases."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith(("gate.weight", "bias", "sinks", "router.weight")):
                param.normal_(0, 0.5)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0, 0.3)


def randomise_like_tiny_v4(model) -> None:
    """tests/models/tiny_deepseek_v4.py's randomisation, the hash table to distinct experts per token."""
    randomise_like_tiny_families(model)
    config = model.config
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith((".scale", "hc_scale")):
                param.uniform_(0.5, 1.5)
            elif name.endswith(("position_bias", ".base", "hc_base", "fn", "hc_fn")):
                param.normal_(0, 0.3)
        for name, buffer in model.named_buffers():
            if name.endswith("tid2eid"):
                picks = [torch.randperm(config.n_routed_experts)[:config.num_experts_per_tok] for _ in buffer]
                buffer.copy_(torch.stack(picks))

"""Tiny random Qwen3, Qwen3-MoE, GLM-4.5 and DeepSeek V3 / V3.2 Hugging Face directories, with the
transformers model as reference.

Norm weights and biases (ones and zeros at init, the V3.2 indexer's key LayerNorm included), routers
and correction biases (zeros) are randomised so q/k norms and routing are exercised.
"""

from __future__ import annotations

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

FAMILY_CONFIGS = {
    # dense Qwen3: GQA, head_dim wider than hidden / heads, tied embeddings
    "qwen3_dense": dict(model_type="qwen3", num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                        tie_word_embeddings=True),
    # Qwen3-MoE: first layer dense (mlp_only_layers), renormalised top-2 of 8 experts, untied
    "qwen3_moe_norm": dict(model_type="qwen3_moe", num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                           mlp_only_layers=[0], num_hidden_layers=3, tie_word_embeddings=False),
    # Qwen3-MoE: every second layer sparse (decoder_sparse_step), plain softmax weights of top-3
    "qwen3_moe_step": dict(model_type="qwen3_moe", num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                           num_experts=6, num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=False,
                           decoder_sparse_step=2, num_hidden_layers=4, tie_word_embeddings=True),
    # GLM-4.5: q/k/v biases, half-rotary heads, no q/k norm, first layer dense, sigmoid routing over
    # 2 groups (best 1 kept) of 4 experts, renormalised and scaled, one shared expert
    "glm45": dict(model_type="glm4_moe", num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  attention_bias=True, partial_rotary_factor=0.5, use_qk_norm=False, n_routed_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1, n_group=2, topk_group=1,
                  routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1, num_hidden_layers=3,
                  tie_word_embeddings=False),
    # GLM-4.5 with q/k norms (as in GLM-4.6/4.7's configs), ungrouped routing, plain weights
    "glm45_qk_norm": dict(model_type="glm4_moe", num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                          attention_bias=True, partial_rotary_factor=0.5, use_qk_norm=True, n_routed_experts=6,
                          num_experts_per_tok=3, moe_intermediate_size=24, n_shared_experts=2, n_group=1,
                          topk_group=1, routed_scaling_factor=1.0, norm_topk_prob=False, first_k_dense_replace=1,
                          num_hidden_layers=2, tie_word_embeddings=True),
    # DeepSeek V3: MLA with a query bottleneck, interleaved rope, first layer dense, sigmoid routing
    # over 4 groups (best 2 kept) of 4 experts, renormalised and scaled, one shared expert
    "deepseek_v3": dict(model_type="deepseek_v3", num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
                        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=16,
                        num_experts_per_tok=3, moe_intermediate_size=24, n_shared_experts=1, n_group=4, topk_group=2,
                        routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1, num_hidden_layers=3,
                        tie_word_embeddings=False),
    # Kimi-K2-like DeepSeek V3: no query bottleneck, ungrouped routing
    "deepseek_v3_no_q_lora": dict(model_type="deepseek_v3", num_attention_heads=2, num_key_value_heads=2,
                                  q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                                  v_head_dim=8, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                                  n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=1.0,
                                  norm_topk_prob=False, first_k_dense_replace=1, num_hidden_layers=2,
                                  tie_word_embeddings=True),
    # DeepSeek V3.2: V3's MLA and routing plus the lightning indexer (8 heads of 16 dims), which keeps
    # 6 tokens per query: shorter than the test prompts, so the sparse selection changes the logits
    "deepseek_v32": dict(model_type="deepseek_v32", num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24,
                         kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
                         n_routed_experts=16, num_experts_per_tok=3, moe_intermediate_size=24, n_shared_experts=1,
                         n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                         first_k_dense_replace=1, num_hidden_layers=3, tie_word_embeddings=False, index_topk=6,
                         index_head_dim=16, index_n_heads=8),
}


def build_tiny_family(directory, name: str):
    """Save a random tiny model as a Hugging Face directory; return the fp32 transformers model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = dict(FAMILY_CONFIGS[name])
    model_type = options.pop("model_type")
    options.setdefault("num_hidden_layers", 2)
    if "partial_rotary_factor" in options:
        options["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                      "partial_rotary_factor": options.pop("partial_rotary_factor")}
    config = AutoConfig.for_model(
        model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96, max_position_embeddings=128,
        rms_norm_eps=1e-6, rope_theta=10000.0, bos_token_id=1, eos_token_id=2, **options)
    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.uniform_(0.5, 1.5)
            elif param_name.endswith("gate.weight"):  # a router: spread logits so top-k choices are clear
                param.normal_(0, 0.5)
            elif param_name.endswith("bias"):
                param.normal_(0, 0.5)
        for buffer_name, buffer in model.named_buffers():
            if buffer_name.endswith("e_score_correction_bias"):
                buffer.normal_(0, 0.3)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def load_tiny_family(directory, dtype="fp32", block_size=4, kv_pool_tokens=4096, cache_dir=None, speculative="",
                     **model_options):
    """The runtime of a tiny HF directory or GGUF file (``cache_dir`` holds a GGUF's conversion)."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime
    from kvgate.models.deepseek_v3.runtime import DEEPSEEK_V3
    from kvgate.models.deepseek_v32.runtime import DEEPSEEK_V32
    from kvgate.models.glm4_moe.family import GLM4_MOE
    from kvgate.models.qwen3.families import QWEN3, QWEN3_MOE

    source = resolve_source(str(directory))
    family = next(f for f in (QWEN3, QWEN3_MOE, GLM4_MOE, DEEPSEEK_V3, DEEPSEEK_V32) if source.architecture in f.names)
    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, speculative=speculative)
    return load_runtime(source, ModelConfig(dtype=dtype, **model_options), engine, str(cache_dir or directory), family)


def hf_layer_tensors(module, prefix: str) -> dict[str, torch.Tensor]:
    """A transformers decoder layer's tensors under checkpoint names (stacked experts split per expert)."""
    out = {}
    for name, tensor in module.state_dict().items():
        if name == "mlp.experts.gate_up_proj":
            width = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = tensor[e, :width]
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = tensor[e, width:]
        elif name == "mlp.experts.down_proj":
            for e in range(tensor.shape[0]):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = tensor[e]
        else:
            out[prefix + name] = tensor
    return out


def add_mtp_layer(directory, model, seed: int = 0) -> dict:
    """Write a random MTP layer (transformers saves none) into a tiny GLM-4.5 directory under the
    checkpoint names, ``model.layers.{num_hidden_layers}.*``, and declare it in config.json.

    Returns its parts for a reference computation: ``block`` (a transformers decoder layer holding
    the MTP block's weights), ``enorm``, ``hnorm``, ``eh_proj``, ``head_norm``, ``head``.
    """
    import copy
    import json

    from safetensors.torch import load_file, save_file

    index = model.config.num_hidden_layers
    generator = torch.Generator().manual_seed(seed)
    block = copy.deepcopy(model.model.layers[index - 1])  # a sparse layer: the MTP block has experts
    with torch.no_grad():
        for name, param in block.named_parameters():
            low, high = (0.5, 1.5) if "norm" in name else (-0.3, 0.3)
            param.copy_(torch.rand(param.shape, generator=generator) * (high - low) + low)
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    parts = {"block": block, "enorm": torch.rand(hidden, generator=generator) + 0.5,
             "hnorm": torch.rand(hidden, generator=generator) + 0.5,
             "eh_proj": torch.randn(hidden, 2 * hidden, generator=generator) * 0.15,
             "head_norm": torch.rand(hidden, generator=generator) + 0.5,
             "head": torch.randn(vocab, hidden, generator=generator) * 0.5}
    prefix = f"model.layers.{index}."
    tensors = load_file(str(directory / "model.safetensors"))
    tensors.update(hf_layer_tensors(block, prefix))
    tensors.update({prefix + "enorm.weight": parts["enorm"], prefix + "hnorm.weight": parts["hnorm"],
                    prefix + "eh_proj.weight": parts["eh_proj"], prefix + "shared_head.norm.weight": parts["head_norm"],
                    prefix + "shared_head.head.weight": parts["head"]})
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return parts

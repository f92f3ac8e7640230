"""A tiny random Qwen3.5 (and Qwen3.5-MoE, Qwen3-Next) written by transformers, with the transformers model as
reference.

Three linear-attention layers and one gated full-attention layer (transformers' default pattern),
grouped heads in both. Every parameter transformers initialises to a constant is randomised: the
zero-centred RMSNorm weights (zeros), the gated norm's weight and ``dt_bias`` (ones); ``A_log``
is spread so that decays differ per head; the MoE's router and shared-expert gate (small at init)
are spread so that expert choices are clear. The tiny Qwen3-Next has a dense MLP in layer 1
(``mlp_only_layers``) and the MoE in the others.
"""

from __future__ import annotations

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

CONFIG = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
              linear_value_head_dim=12, linear_conv_kernel_dim=4, max_position_embeddings=512, rms_norm_eps=1e-6)


def randomise(model) -> None:
    """Give every parameter transformers initialises to a constant random values."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                param.uniform_(0.5, 1.5)
            elif "norm" in name:  # zero-centred: the scale is 1 + weight
                param.normal_(0, 0.3)
            elif name.endswith("dt_bias"):
                param.normal_(0, 0.5)
            elif name.endswith("A_log"):
                param.uniform_(-2, 1)
            elif name.endswith(("mlp.gate.weight", "shared_expert_gate.weight")):
                param.normal_(0, 0.5)


MOE = dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
EXTRA = {"qwen3_5_moe_text": MOE, "qwen3_next": dict(MOE, mlp_only_layers=[1])}  # per model_type
RUNTIMES = {"qwen3_5_text": "qwen3_5", "qwen3_5_moe_text": "qwen3_5_moe", "qwen3_next": "qwen3_next"}


def text_config(vocab: int = VOCAB, model_type: str = "qwen3_5_text", **overrides):
    from transformers import AutoConfig

    extra = EXTRA.get(model_type, {})
    return AutoConfig.for_model(model_type, vocab_size=vocab, bos_token_id=1, eos_token_id=2,
                                **{**CONFIG, **extra, **overrides})


def build_tiny_qwen3_5(directory, seed: int = 0, **overrides):
    """Save a random tiny ``Qwen3_5ForCausalLM`` as a Hugging Face directory; return the fp32 model."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(text_config(**overrides), dtype=torch.float32).eval()
    randomise(model)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def build_tiny_qwen3_5_vl(directory, seed: int = 1):
    """Save a random tiny ``Qwen3_5ForConditionalGeneration`` (a one-block vision tower); return it."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    vision = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=48, out_hidden_size=64, patch_size=2,
                  temporal_patch_size=2, spatial_merge_size=1, num_position_embeddings=16)
    config = Qwen3_5Config(text_config=text_config().to_dict(), vision_config=vision)
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(config).float().eval()
    randomise(model)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def load_tiny_qwen3_5(directory, dtype="fp32", deterministic=True, block_size=4, kv_pool_tokens=4096,
                      state_stride=None, weights="bf16", cache_dir=None):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3_5.runtime import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT

    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, deterministic=deterministic)
    source = resolve_source(str(directory))
    family = next((f for f in (QWEN3_5_MOE, QWEN3_NEXT) if source.architecture in f.names), QWEN3_5)
    runtime = load_runtime(source, ModelConfig(dtype=dtype, weights=weights), engine, str(cache_dir or directory), family)
    if state_stride is not None:
        runtime.state_stride = state_stride
    return runtime

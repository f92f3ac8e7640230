"""Tiny random Gemma 4 text models written by transformers (eager attention), with the transformers
model as reference.

``dense``: sliding and full layers alternating, sliding window 8 (shorter than every test prompt),
full layers with wider heads (``global_head_dim``) and proportional rope, per-layer inputs, final
logit soft-capping. ``shared_moe``: the last two layers read the first two's K/V
(``num_kv_shared_layers``) with double-wide MLPs, full layers' values are their keys
(``attention_k_eq_v``) over one global KV head, attention biases, and the MoE block beside every MLP.
Every parameter (and the ``layer_scalar`` buffer) transformers initialises to one or zero is randomised.
"""

from __future__ import annotations

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, global_head_dim=32, sliding_window=8, max_position_embeddings=512,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)
CONFIGS = {
    "dense": dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, final_logit_softcapping=5.0),
    "shared_moe": dict(hidden_size_per_layer_input=0, num_kv_shared_layers=2, use_double_wide_mlp=True,
                       attention_k_eq_v=True, num_global_key_value_heads=1, attention_bias=True,
                       enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                       tie_word_embeddings=False),
}


def randomise(model) -> None:
    """Give every parameter transformers initialises to a constant random values."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(("router.scale", "per_expert_scale")):
                param.uniform_(0.5, 1.5)
            elif name.endswith("router.proj.weight"):
                param.normal_(0, 0.5)
            elif name.endswith("bias"):
                param.normal_(0, 0.3)
        for name, buffer in model.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.uniform_(0.5, 1.5)


def build_tiny_gemma4(directory, name: str = "dense", seed: int = 0):
    """Save a random tiny ``Gemma4ForCausalLM`` as a Hugging Face directory; return the fp32 model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("gemma4_text", **{**BASE, **CONFIGS[name]})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager").eval()
    randomise(model)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def build_tiny_gemma4_multimodal(directory, seed: int = 1):
    """Save a random tiny ``Gemma4ForConditionalGeneration`` (the dense text model, a one-layer vision
    tower, no audio); return it."""
    from transformers import AutoConfig, Gemma4Config, Gemma4ForConditionalGeneration

    text = AutoConfig.for_model("gemma4_text", **{**BASE, **CONFIGS["dense"]}).to_dict()
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16)
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(Gemma4Config(text_config=text, vision_config=vision, audio_config=None))
    model = model.float().eval()
    randomise(model)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def load_tiny_gemma4(directory, dtype="fp32", deterministic=True, block_size=4, kv_pool_tokens=4096):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.gemma4.runtime import GEMMA4
    from kvgate.models.loading import load_runtime

    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, deterministic=deterministic)
    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype), engine, str(directory), GEMMA4)

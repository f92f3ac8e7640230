"""Tiny random Llama- and Qwen2-style Hugging Face directories, with the transformers model as reference."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 97

TINY_CONFIGS = {
    # GQA (4 query heads over 2 kv heads), tied embeddings, no rope scaling
    "llama_gqa_tied": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    # untied head, llama3 rope scaling
    "llama_untied_llama3": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=1,
                                tie_word_embeddings=False,
                                rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    # linear rope scaling, multi-head attention, attention biases (q/k/v and o)
    "llama_linear": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=4, attention_bias=True,
                         tie_word_embeddings=False, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    # YaRN (Qwen3-style: factor over an original context shorter than the prompt)
    "llama_yarn": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
    # YaRN with DeepSeek's mscale / mscale_all_dim attention factor and custom betas, untruncated
    "llama_yarn_mscale": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2,
                              tie_word_embeddings=False,
                              rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                                            "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 16,
                                            "beta_slow": 2, "truncate": False}),
    # dynamic NTK (recomputed by transformers past max_position_embeddings, fixed at the served context here)
    "llama_dynamic": dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                          rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
    # Qwen2: q/k/v biases, GQA, tied
    "qwen2_bias": dict(model_type="qwen2", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
}


def _tokenizer() -> Tokenizer:
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def build_tiny(directory, name: str):
    """Save a random tiny model as a Hugging Face directory; return the fp32 transformers model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = dict(TINY_CONFIGS[name])
    model_type = options.pop("model_type")
    config = AutoConfig.for_model(
        model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
        **options)
    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # random biases so the Qwen2 bias path is exercised
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias"):
                param.normal_(0, 0.5)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def load_tiny(directory, dtype="fp32", block_size=4, kv_pool_tokens=4096, **model_options):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype, **model_options),
                        EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens), str(directory))


def reference_logits(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([list(tokens)])).logits[0].float()

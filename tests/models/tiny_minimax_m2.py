"""Tiny random MiniMax M2 checkpoints written by transformers, with the transformers model as reference.

Every parameter transformers initialises to a constant is randomised: the RMSNorm weights (ones,
the whole-projection q/k norms included) and the routers' correction biases (zeros); the routers are
spread so that expert choices are clear.
"""

from __future__ import annotations

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

CONFIGS = {
    # GQA 4 / 2, RoPE on 8 of 16 dims (the legacy rotary_dim key), top-2 of 6 experts, untied head
    "partial_rotary": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, rotary_dim=8,
                           num_local_experts=6, num_experts_per_tok=2, tie_word_embeddings=False),
    # one kv head, the whole head rotated, top-3 of 8 experts, three layers, tied embeddings
    "full_rotary": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=24, num_local_experts=8,
                        num_experts_per_tok=3, num_hidden_layers=3, tie_word_embeddings=True),
}


def minimax_config(name: str, vocab: int = VOCAB, **overrides):
    from transformers import AutoConfig

    options = {"hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "max_position_embeddings": 256,
               "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
               **CONFIGS[name], **overrides}
    return AutoConfig.for_model("minimax_m2", vocab_size=vocab, **options)


def randomise(model) -> None:
    """Give every parameter and buffer transformers initialises to a constant random values."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("mlp.gate.weight"):
                param.normal_(0, 0.5)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0, 0.3)


def build_tiny_minimax_m2(directory, name: str, **overrides):
    """Save a random tiny ``MiniMaxM2ForCausalLM`` as a Hugging Face directory; return the fp32 model."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(minimax_config(name, **overrides), dtype=torch.float32).eval()
    randomise(model)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def load_tiny_minimax_m2(directory, dtype="fp32", block_size=4, kv_pool_tokens=4096, **engine_options):
    """The MiniMax M2 runtime of a tiny Hugging Face directory."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime
    from kvgate.models.minimax_m2.family import MINIMAX_M2

    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, **engine_options)
    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype), engine, str(directory), MINIMAX_M2)

"""A tiny random DeepSeek V4 Hugging Face directory, with the transformers model as reference.

Three layers, one of each attention kind -- sliding-only, CSA (an entry per 4 tokens, top-2 of them
chosen by an 8-head indexer) and HCA (an entry per 8 tokens) -- over a window of 8 tokens, so a
prompt of a few dozen tokens crosses every window and compression boundary. The first MLP routes
by the token-id hash table, the others by sqrt-softplus scores; two residual streams.

transformers initialises position biases, attention sinks, hyper-connection biases and the hash
table to zeros (and norms to ones), which would leave most of the arithmetic untested: they are
randomised here, the hash table to two distinct experts per token.
"""

from __future__ import annotations

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

LAYER_TYPES = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
TINY_V4 = dict(
    vocab_size=VOCAB, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=1, head_dim=32, qk_rope_head_dim=8, q_lora_rank=32, o_groups=2, o_lora_rank=16,
    layer_types=LAYER_TYPES, mlp_layer_types=["hash_moe", "moe", "moe"],
    compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}, sliding_window=8,
    index_n_heads=8, index_head_dim=16, index_topk=2, n_routed_experts=4, num_experts_per_tok=2,
    n_shared_experts=1, routed_scaling_factor=1.5, hc_mult=2, hc_sinkhorn_iters=20, swiglu_limit=10.0,
    max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)


def build_tiny_v4(directory, seed: int = 4, **overrides):
    """Save a random tiny V4 model as a Hugging Face directory; return the fp32 transformers model."""
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = DeepseekV4Config(**{**TINY_V4, **overrides})
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(config).to(torch.float32).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(".scale") or name.endswith("hc_scale"):
                param.uniform_(0.5, 1.5)
            elif name.endswith(("position_bias", "sinks", ".base", "hc_base")):
                param.normal_(0, 0.5)
            elif name.endswith("gate.weight"):  # routers: spread the scores so top-k choices are clear
                param.normal_(0, 0.5)
            elif name.endswith(("fn", "hc_fn")):
                param.normal_(0, 0.3)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0, 0.3)
            elif name.endswith("tid2eid"):
                experts, top_k = config.n_routed_experts, config.num_experts_per_tok
                buffer.copy_(torch.stack([torch.randperm(experts)[:top_k] for _ in range(buffer.shape[0])]))
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def reference_logits(model, tokens) -> torch.Tensor:
    """transformers' logits of every position of one forward over ``tokens`` (no cache)."""
    with torch.no_grad():
        return model(torch.tensor([list(tokens)]), use_cache=False).logits[0].float()


def load_tiny_v4(directory, dtype="fp32", block_size=4, kv_pool_tokens=4096, speculative=""):
    """The kvgate runtime of a tiny V4 directory."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.deepseek_v4.runtime import DEEPSEEK_V4
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, speculative=speculative)
    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype), engine, str(directory), DEEPSEEK_V4)


def add_mtp_layer(directory, seed: int = 5) -> dict:
    """Write a random MTP layer (transformers neither builds nor saves one) into a tiny V4 directory
    under DeepSeek's names, ``mtp.0.*``: its block is the fourth layer of another random tiny V4
    model with a sliding-only, learned-routing fourth layer.

    Returns its parts for a reference computation: ``block`` (that transformers decoder layer),
    ``rotary`` (its model's rotary embedding) and the tensors ``enorm``, ``hnorm``, ``e_proj``,
    ``h_proj``, ``hc_fn``, ``hc_base``, ``hc_scale``, ``norm``.
    """
    source, parts = random_mtp_layer(seed)
    write_mtp_layer(directory, source, parts)
    return parts


def random_mtp_layer(seed: int = 5):
    """(the 4-layer transformers model whose fourth layer is the block, the parts of :func:`add_mtp_layer`)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as other:
        source = build_tiny_v4(Path(other), seed=seed, num_hidden_layers=4,
                               layer_types=LAYER_TYPES + ["sliding_attention"],
                               mlp_layer_types=["hash_moe", "moe", "moe", "moe"])
    generator = torch.Generator().manual_seed(seed)
    hidden, hc = TINY_V4["hidden_size"], TINY_V4["hc_mult"]
    parts = {"enorm": torch.rand(hidden, generator=generator) + 0.5,
             "hnorm": torch.rand(hidden, generator=generator) + 0.5,
             "e_proj": torch.randn(hidden, hidden, generator=generator) * 0.15,
             "h_proj": torch.randn(hidden, hidden, generator=generator) * 0.15,
             "hc_fn": torch.randn(hc, hc * hidden, generator=generator) * 0.3,
             "hc_base": torch.randn(hc, generator=generator) * 0.5,
             "hc_scale": torch.rand(1, generator=generator) + 0.5,
             "norm": torch.rand(hidden, generator=generator) + 0.5}
    return source, {**parts, "block": source.model.layers[3], "rotary": source.model.rotary_emb}


def write_mtp_layer(directory, source, parts: dict) -> None:
    """Add ``mtp.0.*`` to the directory's weights: the source model's fourth layer and the parts' tensors."""
    import tempfile
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory() as other:
        source.save_pretrained(other)
        saved = load_file(str(Path(other) / "model.safetensors"))
    block_tensors = {name.removeprefix("model.layers.3."): t for name, t in saved.items()
                     if name.startswith("model.layers.3.")}
    names = {"enorm": "enorm.weight", "hnorm": "hnorm.weight", "e_proj": "e_proj.weight", "h_proj": "h_proj.weight",
             "hc_fn": "hc_head_fn", "hc_base": "hc_head_base", "hc_scale": "hc_head_scale", "norm": "norm.weight"}
    tensors = load_file(str(directory / "model.safetensors"))
    tensors.update({"mtp.0." + name: t for name, t in block_tensors.items()})
    tensors.update({"mtp.0." + names[key]: parts[key].detach() for key in names})
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
              metadata={"format": "pt"})

"""Tiny random gpt-oss Hugging Face directories written by transformers, with the fp32 transformers
model (eager attention, the sinks' reference) to compare against.

Three layers (sliding, full, sliding) over a 5-token window, so prompts longer than it make the
window matter; YaRN over an original context of 16 positions; q/k/v/o biases, sinks, norms,
router and expert biases (zeros or ones at init, or tiny) randomised; expert weights spread and
``swiglu_limit`` lowered to 1.5 so the clamp is reached. :func:`write_mxfp4` rewrites a
directory's experts as MXFP4 blocks and scales (the way real checkpoints ship them).
"""

from __future__ import annotations

import json
from typing import Optional

import torch

from tests.models.tiny_models import VOCAB, _tokenizer

YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 16.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
CONFIG = dict(hidden_size=64, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=5, swiglu_limit=1.5,
              max_position_embeddings=512, rope_parameters=YARN, tie_word_embeddings=False)
# A ChatML-like template (the tiny checkpoint carries the SmolLM2 tokenizer, whose specials are ChatML's)
CHATML = ("{%- for message in messages %}"
          "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def tiny_model(vocab: int = VOCAB, seed: int = 7, **overrides):
    """A random fp32 transformers gpt-oss model, every constant-initialised parameter randomised."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = {"bos_token_id": None, "eos_token_id": None, **CONFIG, **overrides}
    config = AutoConfig.for_model("gpt_oss", vocab_size=vocab, **options)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias") or name.endswith("sinks") or name.endswith("router.weight"):
                param.normal_(0, 0.5)
            elif name.endswith("gate_up_proj"):
                param.normal_(0, 0.3)
    return model


def build_tiny_gpt_oss(directory, **overrides):
    """A tiny directory with the 97-word test tokenizer; returns the transformers model."""
    model = tiny_model(**overrides)
    model.save_pretrained(directory)
    _tokenizer().save(str(directory / "tokenizer.json"))
    return model


def write_tiny_gpt_oss(directory, tokenizer, template: Optional[str] = CHATML, eos: str = "<|im_end|>",
                       seed: int = 3):
    """A tiny directory carrying ``tokenizer`` (a ``tokenizers.Tokenizer``) and ``template`` (None:
    no Jinja template, so the dialect's chat format renders), ``eos`` ending a turn; returns the
    transformers model (fp32, eager attention)."""
    model = tiny_model(vocab=tokenizer.get_vocab_size(), seed=seed, max_position_embeddings=2048,
                       eos_token_id=tokenizer.token_to_id(eos))
    model.generation_config.eos_token_id = tokenizer.token_to_id(eos)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    own_template = {} if template is None else {"chat_template": template}
    (directory / "tokenizer_config.json").write_text(json.dumps({**own_template, "eos_token": eos}))
    return model


def random_mxfp4(shape: tuple[int, ...], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 ``(blocks [*shape, 16], scales [*shape])``: every code, scales 2^-6 .. 2^0."""
    blocks = torch.randint(0, 256, (*shape, 16), generator=generator, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(121, 128, shape, generator=generator, dtype=torch.int32).to(torch.uint8)
    return blocks, scales


def write_mxfp4(directory, model, seed: int = 0) -> None:
    """Replace the experts of ``directory`` by random MXFP4 ones, declared in its config.json, and load
    into ``model`` what transformers' own dequantization makes of them (its reference)."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    generator = torch.Generator().manual_seed(seed)
    tensors = load_file(str(directory / "model.safetensors"))
    for index, layer in enumerate(model.model.layers):
        for proj in ("gate_up_proj", "down_proj"):
            name = f"model.layers.{index}.mlp.experts.{proj}"
            param = getattr(layer.mlp.experts, proj)  # [experts, in, out]; a block row is one output
            blocks, scales = random_mxfp4((param.shape[0], param.shape[2], param.shape[1] // 32), generator)
            del tensors[name]
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
            with torch.no_grad():
                param.copy_(convert_moe_packed_tensors(blocks, scales, dtype=torch.float32))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def load_tiny_gpt_oss(directory, dtype="fp32", block_size=4, kv_pool_tokens=4096, deterministic=True,
                      **model_options):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.gpt_oss.runtime import GPT_OSS
    from kvgate.models.loading import load_runtime

    engine = EngineConfig(block_size=block_size, kv_pool_tokens=kv_pool_tokens, deterministic=deterministic)
    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype, **model_options), engine,
                        str(directory), GPT_OSS)

"""Mid-size random checkpoints of every runtime family kvgate registers, for measuring cost at a size
whose per-token work is dominated by the real model's kernels (the tests' tiny ones measure overhead).

Each is hidden 512, 4-6 layers, real head dims and experts scaled to 32 (top-4), so one token's
forward is ~25-70 MFLOP (:func:`flops_per_token`). They are written by transformers through the
tests' tiny builders (every constant-initialised parameter randomised) with bigger configs, and
cached under the temp dir keyed by the config. ``small=True`` divides widths by 4 (smoke tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' builders
sys.path.insert(0, str(Path(__file__).resolve().parent))

from family_configs import (FAMILIES, MODEL_TYPES, experts_of, randomise_like_tiny_families,  # noqa: E402
                            randomise_like_tiny_v4)

VOCAB = 2048
SCALED = ("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")


def family_config(name: str, small: bool = False) -> dict:
    """The transformers config options of ``name``'s checkpoint (widths / 4 when ``small``)."""
    config = {"vocab_size": VOCAB, "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2,
              **FAMILIES[name]}
    if small:
        config.update({key: config[key] // 4 for key in SCALED if key in config})
    return config


def checkpoint(name: str, small: bool = False) -> str:
    """The directory of ``name``'s checkpoint, written once per config."""
    config = family_config(name, small)
    key = hashlib.sha256(json.dumps([name, config], sort_keys=True).encode()).hexdigest()[:12]
    directory = Path(tempfile.gettempdir()) / "kvgate-bench-models" / "families" / f"{name}-{key}"
    if not (directory / "tokenizer.json").exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=directory.parent))
        model = build(name, config)
        model.save_pretrained(partial)
        word_tokenizer(config["vocab_size"]).save(str(partial / "tokenizer.json"))
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(partial, directory)
    return str(directory)


def build(name: str, config: dict):
    """A random fp32 transformers model of ``name`` (the tests' builder, or its randomisation)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(config)
    torch.manual_seed(sum(map(ord, name)))
    if name == "gpt_oss":
        from tests.models.tiny_gpt_oss import tiny_model
        return tiny_model(vocab=config.pop("vocab_size"), **config)
    if name == "deepseek_v4":
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
        from tests.models.tiny_deepseek_v4 import TINY_V4
        model = DeepseekV4ForCausalLM(DeepseekV4Config(**{**TINY_V4, **config}))
    else:
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(MODEL_TYPES[name], **config),
                                                 dtype=torch.float32)
    randomise(name, model.float().eval())
    return model


def randomise(name: str, model) -> None:
    from tests.models import tiny_gemma4, tiny_minimax_m2, tiny_qwen3_5

    special = {"gemma4": tiny_gemma4.randomise, "minimax_m2": tiny_minimax_m2.randomise,
               "qwen3_5": tiny_qwen3_5.randomise, "qwen3_5_moe": tiny_qwen3_5.randomise,
               "qwen3_next": tiny_qwen3_5.randomise, "deepseek_v4": randomise_like_tiny_v4}
    special.get(name, randomise_like_tiny_families)(model)


def word_tokenizer(vocab: int) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def active_flops_per_token(model, experts_per_token: int, experts: int) -> float:
    """Forward FLOPs of one token at short context: 2 x the parameters it uses (a top-k share of experts)."""
    total = 0.0
    for name, param in model.named_parameters():
        share = experts_per_token / experts if "experts" in name and experts else 1.0
        total += 0 if "embed" in name else param.numel() * share
    return 2 * total


def flops_per_token(name: str, small: bool = False) -> float:
    """:func:`active_flops_per_token` of ``name``'s model, built on the meta device (no memory, no time)."""
    import torch

    config = family_config(name, small)
    with torch.device("meta"):
        model = build(name, config)
    return active_flops_per_token(model, *experts_of(config))

"""The models bench_agent_cache can serve besides the embedded SmolLM2: tiny random checkpoints of a
hybrid (Qwen3.5: three Gated DeltaNet layers and one gated full-attention layer) and of a dense
Qwen3 of the same width and depth (hidden 64, 4 layers), both on SmolLM2's tokenizer with a ChatML
template, so the workload's texts tokenize as they do for the embedded model. Written by
transformers once, cached under the temp dir; the hybrid's constant-initialised parameters are
randomised as the tests' tiny checkpoint's are.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' builders

FAMILIES = ("qwen3", "qwen3_5")
WIDTHS = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=16384)
MAX_CONTEXT = 16384


def model_settings(family: str) -> dict:
    """The ``[model]`` settings that serve ``family``'s checkpoint."""
    return {"path": checkpoint(family), "name": f"tiny-{family}", "max_context": MAX_CONTEXT}


def checkpoint(family: str) -> str:
    directory = Path(tempfile.gettempdir()) / "kvgate-bench-models" / "agent" / family
    if not (directory / "tokenizer_config.json").exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f"{family}-", dir=directory.parent))
        write(family, partial)
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(partial, directory)
    return str(directory)


def write(family: str, directory: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf
    from tests.models.test_families_server import TEMPLATE
    from tests.models.tiny_qwen3_5 import randomise, text_config

    tokenizer = smollm2_from_gguf()
    if family == "qwen3_5":
        config = text_config(vocab=tokenizer.get_vocab_size(), **WIDTHS)
    else:
        config = AutoConfig.for_model("qwen3", vocab_size=tokenizer.get_vocab_size(), tie_word_embeddings=True, **WIDTHS)
    config.eos_token_id, config.bos_token_id = tokenizer.token_to_id("<|im_end|>"), None
    torch.manual_seed(len(family))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    if family == "qwen3_5":
        randomise(model)
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "eos_token": "<|im_end|>"}))

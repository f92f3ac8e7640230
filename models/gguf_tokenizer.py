"""Build a ``tokenizers.Tokenizer`` from GGUF tokenizer metadata (byte-level BPE, ``gpt2`` model).

Pre-tokenizers follow llama.cpp's ``tokenizer.ggml.pre`` names: ``smollm`` splits every digit on
its own first, then applies GPT-2 byte-level splitting. Control tokens become added special
tokens; user-defined tokens become added (non-special) tokens.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

CONTROL, USER_DEFINED = 3, 4
_LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _regex_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def pre_tokenizer(name: str) -> pre_tokenizers.PreTokenizer:
    if name == "smollm":
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    if name in ("default", "gpt-2", "gpt2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name in ("llama-bpe", "llama3", "smaug-bpe"):
        return _regex_then_bytes(_LLAMA3_PATTERN)
    if name == "qwen2":
        return _regex_then_bytes(_QWEN2_PATTERN)
    raise ValueError(f"unsupported GGUF pre-tokenizer {name!r} (supported: smollm, gpt2, llama-bpe, qwen2)")


def build_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """``meta`` maps GGUF keys (``tokenizer.ggml.*``) to their decoded values."""
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {kind!r} (only byte-level BPE 'gpt2' is supported)")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    vocab = {token: index for index, token in enumerate(tokens)}
    pre = meta.get("tokenizer.ggml.pre", "default")
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False,
                                     ignore_merges=pre in ("llama-bpe", "llama3")))
    tokenizer.pre_tokenizer = pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    added = [AddedToken(tokens[i], special=types[i] == CONTROL, normalized=False)
             for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)]
    tokenizer.add_special_tokens([t for t in added if t.special])
    tokenizer.add_tokens([t for t in added if not t.special])
    return tokenizer


def special_token_texts(meta: dict[str, Any]) -> dict[str, str]:
    tokens = meta["tokenizer.ggml.tokens"]
    keys = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
            "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}
    out = {}
    for name, key in keys.items():
        index = meta.get(f"tokenizer.ggml.{key}")
        if isinstance(index, int) and 0 <= index < len(tokens):
            out[name] = tokens[index]
    return out

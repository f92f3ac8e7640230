"""``GetTokenizer``'s archive: the served model's tokenizer as SMG's gateway loads it.

A zip of three files, built from the loaded runtime (so a converted GGUF works like a Hugging Face
directory): ``tokenizer.json`` (the ``tokenizers`` object's own serialisation),
``tokenizer_config.json`` (the chat template kvgate renders with, the special tokens, the context
length) and a minimal ``config.json`` (architecture, vocabulary, context, BOS/EOS ids). It is
streamed in chunks of :data:`CHUNK_BYTES`; the last chunk carries the archive's SHA-256 (hex).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Iterator

CHUNK_BYTES = 64 * 1024


def tokenizer_files(runtime) -> dict[str, str]:
    info = runtime.info
    specials = dict(getattr(runtime, "special_tokens", {}) or {})
    tokenizer_config = {**specials, "model_max_length": info.max_context, "clean_up_tokenization_spaces": False,
                        "tokenizer_class": "PreTrainedTokenizerFast"}
    if runtime.chat_template:
        tokenizer_config["chat_template"] = runtime.chat_template
    config = {"model_type": info.architecture, "architectures": [f"{info.architecture.capitalize()}ForCausalLM"],
              "vocab_size": info.vocab_size, "max_position_embeddings": info.max_context,
              "eos_token_id": info.eos_token_ids[0] if len(info.eos_token_ids) == 1 else list(info.eos_token_ids),
              "bos_token_id": info.bos_token_id}
    return {"tokenizer.json": runtime.tokenizer.to_str(), "tokenizer_config.json": json.dumps(tokenizer_config),
            "config.json": json.dumps(config)}


def tokenizer_archive(runtime) -> tuple[bytes, str]:
    """(zip bytes, their SHA-256 hex digest)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in tokenizer_files(runtime).items():
            archive.writestr(name, text)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def archive_chunks(data: bytes, digest: str) -> Iterator[tuple[bytes, str]]:
    """(bytes, sha256) pieces: the digest on the last one only."""
    starts = range(0, len(data), CHUNK_BYTES)
    for start in starts:
        last = start + CHUNK_BYTES >= len(data)
        yield data[start:start + CHUNK_BYTES], digest if last else ""

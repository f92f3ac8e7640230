"""Cache identity and token hashing.

A namespace is a fingerprint of everything that decides what state a token sequence produces and
how a conversation turns into tokens: weights and architecture (the runtime fingerprint), dtype,
chat template, dialect and tokenizer. State is only ever shared inside one namespace.

Chunk keys on SSD form a hash chain: ``key_0 = H(ROOT || namespace)`` and
``key_i = H(key_{i-1} || tokens of chunk i)`` (tokens as little-endian uint32), so a key names a
chunk *and* everything before it; equal prefixes give equal keys, and a shared system prompt is
stored once.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from typing import Iterable, Sequence

NAMESPACE_VERSION = b"kvgate-namespace-v1"
CHAIN_ROOT = b"kvgate-chain-v1"
DIGEST_SIZE = 32


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def namespace_for(runtime_fingerprint: str, dtype: str, chat_template: str | None, dialect_name: str,
                  tokenizer_fingerprint: str) -> str:
    """The namespace string of one model setup; any changed input gives a different namespace."""
    fields = [runtime_fingerprint, dtype, chat_template or "", dialect_name, tokenizer_fingerprint]
    return "ns-" + _digest(NAMESPACE_VERSION, *(f.encode("utf-8") for f in fields)).hex()[:40]


def pack_tokens(tokens: Iterable[int]) -> bytes:
    """Token ids as little-endian uint32 bytes."""
    packed = array("I", tokens)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def unpack_tokens(data: bytes) -> list[int]:
    if len(data) % 4:
        raise ValueError(f"packed tokens must be a multiple of 4 bytes, got {len(data)}")
    packed = array("I")
    packed.frombytes(data)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


def chain_root(namespace: str) -> bytes:
    return _digest(CHAIN_ROOT, namespace.encode("utf-8"))


def chain_next(previous: bytes, tokens: Sequence[int]) -> bytes:
    return _digest(previous, pack_tokens(tokens))


def chunk_keys(namespace: str, tokens: Sequence[int], chunk_tokens: int) -> list[bytes]:
    """Keys of the chunks of ``tokens``: full chunks of ``chunk_tokens``, then the partial tail."""
    keys, key = [], chain_root(namespace)
    for start in range(0, len(tokens), chunk_tokens):
        key = chain_next(key, tokens[start:start + chunk_tokens])
        keys.append(key)
    return keys


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b``, known to agree on ``[0, start)``."""
    limit = min(len(a), len(b))
    step = 256
    i = start
    while i + step <= limit and a[i:i + step] == b[i:i + step]:
        i += step
    while i < limit and a[i] == b[i]:
        i += 1
    return i

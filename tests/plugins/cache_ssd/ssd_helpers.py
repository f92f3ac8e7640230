"""Helpers for SSD-store tests: deterministic synthetic payloads (real bytes on real disk)."""

from __future__ import annotations

import hashlib

from kvgate.core.cache.namespace import chunk_keys
from kvgate.core.cache.snapshot import PendingSnapshot

BPT = 24  # bytes per token of the synthetic payloads
FORMAT = "synthetic/1 24 bytes per token"  # the state format of the synthetic payloads


def token_state(namespace: str, position: int, token: int) -> bytes:
    """Synthetic per-token state that depends on the namespace, the position and the token."""
    return hashlib.blake2b(f"{namespace}/{position}/{token}".encode(), digest_size=BPT).digest()


def chunk_payload(namespace: str, tokens: list[int], start: int, end: int) -> bytes:
    return b"".join(token_state(namespace, p, tokens[p]) for p in range(start, end))


def pending(namespace: str, tokens: list[int], chunk_tokens: int, cache_key=None, round_=1,
            skip: set[int] = frozenset()) -> PendingSnapshot:
    keys = chunk_keys(namespace, tokens, chunk_tokens)
    payloads = {}
    for i in range(len(keys)):
        if i not in skip:
            start = i * chunk_tokens
            payloads[i] = chunk_payload(namespace, tokens, start, min(start + chunk_tokens, len(tokens)))
    return PendingSnapshot(namespace=namespace, tokens=list(tokens), cache_key=cache_key, round=round_,
                           chunk_tokens=chunk_tokens, keys=keys, payloads=payloads,
                           state_bytes=len(tokens) * BPT, state_format=FORMAT)

"""Manifest records of SSD snapshots: one JSON object per snapshot, validated field by field.

A record (stored as UTF-8 JSON bytes under key ``snap:<id>``), version 2::

    {"v": 2, "id": hex, "namespace": str, "cache_key": str | null, "tokens": base64 uint32 LE,
     "round": int, "bytes": int, "generation": int, "chunk_tokens": int, "state_format": str,
     "chunks": [hex chunk key, ...], "created": float, "last_used": float}

``id`` is the chunk key of the last chunk: it names the namespace and every token of the snapshot.
``state_format`` is the runtime's chunk layout (:attr:`kvgate.core.runtime.ModelRuntime.state_format`).
A record of another version (version 1 had no state format and per-token payloads) raises
:class:`StaleRecord`: the store drops it with a log line.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Optional

import attrs

from kvgate.core.cache.namespace import pack_tokens, unpack_tokens

RECORD_VERSION = 2
PREFIX = "snap:"


class BadRecord(ValueError):
    """A manifest record that is not a well-formed snapshot description."""


class StaleRecord(BadRecord):
    """A well-formed record of another record version or runtime state format: never read."""


@attrs.define(eq=False)
class SnapshotRecord:
    id: str
    namespace: str
    cache_key: Optional[str]
    tokens: list[int]
    round: int
    bytes: int
    generation: int
    chunk_tokens: int
    chunks: list[bytes]
    created: float
    last_used: float
    state_format: str = ""
    trie_node: Any = None  # set by the SSD index

    def chunk_span(self, index: int) -> tuple[int, int]:
        start = index * self.chunk_tokens
        return start, min(start + self.chunk_tokens, len(self.tokens))

    def to_json(self) -> bytes:
        return json.dumps({
            "v": RECORD_VERSION, "id": self.id, "namespace": self.namespace, "cache_key": self.cache_key,
            "tokens": base64.b64encode(pack_tokens(self.tokens)).decode(), "round": self.round,
            "bytes": self.bytes, "generation": self.generation, "chunk_tokens": self.chunk_tokens,
            "state_format": self.state_format, "chunks": [c.hex() for c in self.chunks], "created": self.created, "last_used": self.last_used,
        }).encode()


def _field(data: dict, name: str, kind: type | tuple) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRecord(f"field {name!r} is missing or not {kind}")
    return value


def record_from_json(raw: Any) -> SnapshotRecord:
    try:
        data = json.loads(raw)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise BadRecord(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRecord("not a record")
    if data.get("v") != RECORD_VERSION:
        if isinstance(data.get("v"), int) and not isinstance(data.get("v"), bool):
            raise StaleRecord(f"stale record version {data['v']}, this build reads version {RECORD_VERSION}")
        raise BadRecord(f"not a version-{RECORD_VERSION} record")
    try:
        tokens = unpack_tokens(base64.b64decode(_field(data, "tokens", str), validate=True))
        chunks = [bytes.fromhex(c) for c in _field(data, "chunks", list)]
    except (ValueError, TypeError, binascii.Error) as exc:
        raise BadRecord(f"bad tokens or chunk list: {exc}") from None
    cache_key = data.get("cache_key")
    record = SnapshotRecord(
        id=_field(data, "id", str), namespace=_field(data, "namespace", str),
        cache_key=cache_key if isinstance(cache_key, str) else None, tokens=tokens,
        round=_field(data, "round", int), bytes=_field(data, "bytes", int),
        generation=_field(data, "generation", int), chunk_tokens=_field(data, "chunk_tokens", int),
        chunks=chunks, created=float(_field(data, "created", (int, float))),
        last_used=float(_field(data, "last_used", (int, float))),
        state_format=_field(data, "state_format", str))
    check_record(record)
    return record


def check_record(record: SnapshotRecord) -> None:
    if not record.tokens or record.chunk_tokens <= 0 or record.bytes < 0 or record.round < 1:
        raise BadRecord("empty snapshot or non-positive sizes")
    expected = -(-len(record.tokens) // record.chunk_tokens)
    if len(record.chunks) != expected or any(len(c) != 32 for c in record.chunks):
        raise BadRecord(f"{len(record.chunks)} chunk keys for {len(record.tokens)} tokens, expected {expected}")
    if record.id != record.chunks[-1].hex()[:32]:
        raise BadRecord("snapshot id does not match its last chunk key")

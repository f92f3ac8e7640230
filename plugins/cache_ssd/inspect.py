"""Read-only reports over an SSD store, for ``kvgate cache ls | inspect | diagnose``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.core.cache.snapshot import BadChunk
from kvgate.plugins.cache_ssd.chunk_files import chunk_key_of
from kvgate.plugins.cache_ssd.records import SnapshotRecord
from kvgate.plugins.cache_ssd.store import SsdStore


def summary(record: SnapshotRecord) -> dict[str, Any]:
    return {"id": record.id, "namespace": record.namespace, "cache_key": record.cache_key,
            "tokens": len(record.tokens), "round": record.round, "bytes": record.bytes,
            "generation": record.generation, "chunks": len(record.chunks), "created": record.created,
            "last_used": record.last_used}


def find(store: SsdStore, prefix: str) -> SnapshotRecord:
    matches = [r for r in store.records.values() if r.id.startswith(prefix)]
    if len(matches) != 1:
        raise KeyError(f"{len(matches)} snapshots match {prefix!r}" if matches else f"no snapshot {prefix!r}")
    return matches[0]


def details(store: SsdStore, record: SnapshotRecord) -> dict[str, Any]:
    chunks = []
    for index, key in enumerate(record.chunks):
        start, end = record.chunk_span(index)
        path = store.chunk_path(key)
        size = path.stat().st_size if path.exists() else None
        chunks.append({"index": index, "key": key.hex(), "tokens": [start, end], "file_bytes": size,
                       "shared_by": store.chunk_refs.get(key, 0)})
    return {**summary(record), "first_tokens": record.tokens[:16], "last_tokens": record.tokens[-16:],
            "chunk_tokens": record.chunk_tokens, "chunk_files": chunks}


def diagnose(store: SsdStore) -> dict[str, Any]:
    """Read and validate every chunk of every snapshot; count stray files and unreadable records."""
    bad = [{"id": key, "reason": reason} for key, reason in store.dropped_at_load]
    for record in store.records.values():
        try:
            store.read(record, len(record.chunks))
        except BadChunk as exc:
            bad.append({"id": record.id, "reason": str(exc)})
    referenced = set(store.chunk_refs)
    stray = [p for p in Path(store.chunks_dir).glob("*/*") if chunk_key_of(p.name) not in referenced]
    return {"path": str(store.root), "snapshots": len(store.records), "bytes": store.total_bytes,
            "generation": store.manifest.generation, "bad": bad, "unreferenced_files": len(stray),
            "healthy": not bad}

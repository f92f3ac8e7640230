"""The SSD store: content-addressed chunk files plus the manifest that names snapshots.

Layout under the store root::

    chunks/<2 hex>/<64 hex chunk key>.kvc    one chunk (:mod:`.chunk_format`, :mod:`.chunk_files`)
    manifest/                                diskcache database (:mod:`.manifest`)
    lock                                     flock held by the process that writes

Commit boundary: a snapshot's missing chunks are written to a temporary name, fsynced, renamed and
their directories fsynced *before* the manifest transaction that names the snapshot and moves to a
new generation. A crash therefore leaves at worst unreferenced chunk files, which
:meth:`SsdStore.remove_orphans` deletes at the next start. The store is single-writer;
:meth:`SsdStore.read` may run on other threads.

A store opened with the runtime's ``state_format`` drops, at start, every snapshot of another
record or chunk version or of another state format (logged as stale); without one (the CLI) it
reads any format.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import Iterable, Optional

from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd.chunk_files import ChunkFiles, fsync_directory, remove_path
from kvgate.plugins.cache_ssd.chunk_format import encode_chunk
from kvgate.plugins.cache_ssd.manifest import StoreBusy, lock_store, open_manifest
from kvgate.plugins.cache_ssd.records import BadRecord, SnapshotRecord

log = logging.getLogger("kvgate.cache")
__all__ = ["PendingSnapshot", "SsdStore", "StoreBusy"]


class SsdStore:
    def __init__(self, root: Path, chunk_tokens: int, capacity_bytes: int,
                 state_format: Optional[str] = None, writer: bool = True):
        self.root = Path(root)
        self.files = ChunkFiles(self.root / "chunks", state_format)
        self.chunks_dir = self.files.root
        self.chunk_tokens, self.capacity_bytes, self.state_format = chunk_tokens, capacity_bytes, state_format
        self._lock_handle = lock_store(self.root) if writer else None
        try:
            self.manifest = open_manifest(self.root / "manifest", writer)
        except BaseException:
            self._release_lock()
            raise
        self.records: dict[str, SnapshotRecord] = {}
        self.chunk_refs: collections.Counter[bytes] = collections.Counter()
        self.chunk_sizes: dict[bytes, int] = {}
        self.total_bytes = 0
        self.dropped_at_load: list[tuple[str, str]] = []

    def chunk_path(self, key: bytes) -> Path:
        return self.files.path(key)

    # --- index ------------------------------------------------------------------------------------
    def load_index(self, drop_bad: bool = True) -> list[SnapshotRecord]:
        """Read every manifest record; drop (or only report) those that are stale (another version
        or state format) or whose chunks are missing or wrong."""
        checked: dict[tuple[bytes, int], str] = {}
        for key, record in self.manifest.records():
            reason = str(record) if isinstance(record, BadRecord) else self._record_problem(record, checked)
            if not reason:
                self._register(record)
                continue
            self.dropped_at_load.append((key, reason))
            if drop_bad:
                log.warning("SSD cache: dropping snapshot %s at start: %s", key, reason)
                self.manifest.delete_key(key)
        return list(self.records.values())

    def _record_problem(self, record: SnapshotRecord, checked: dict[tuple[bytes, int], str]) -> str:
        if self.state_format is not None and record.state_format != self.state_format:
            return f"stale state format {record.state_format!r}, the runtime's is {self.state_format!r}"
        for index, key in enumerate(record.chunks):
            start, end = record.chunk_span(index)
            if (key, end - start) not in checked:
                checked[(key, end - start)] = self.files.header_problem(key, end - start)
            problem = checked[(key, end - start)]
            if problem:
                return f"chunk {index} is {problem}"
        return ""

    def _register(self, record: SnapshotRecord) -> None:
        self.records[record.id] = record
        for key in record.chunks:
            if self.chunk_refs[key] == 0 and key not in self.chunk_sizes:
                size = self.chunk_path(key).stat().st_size
                self.chunk_sizes[key] = size
                self.total_bytes += size
            self.chunk_refs[key] += 1

    def _unregister(self, record: SnapshotRecord) -> list[bytes]:
        """Forget ``record``; returns the chunk keys nothing references any more."""
        del self.records[record.id]
        unreferenced = []
        for key in record.chunks:
            self.chunk_refs[key] -= 1
            if self.chunk_refs[key] <= 0:
                del self.chunk_refs[key]
                unreferenced.append(key)
        return unreferenced

    def remove_orphans(self, pinned: Iterable[bytes] = ()) -> int:
        """Delete temporary files and chunk files no snapshot names (left by a crash)."""
        strays = self.files.strays(set(self.chunk_refs) | set(pinned))
        for path in strays:
            remove_path(path)
        return len(strays)

    # --- writes (one writer) ----------------------------------------------------------------------
    def commit(self, pending: PendingSnapshot) -> SnapshotRecord:
        """Write the missing chunks durably, then name the snapshot in a new manifest generation."""
        directories = set()
        for index, key in enumerate(pending.keys):
            tokens = pending.chunk_tokens_at(index)
            if not self.files.header_problem(key, len(tokens)):
                continue
            payload = pending.payloads.get(index)
            if payload is None:
                raise FileNotFoundError(f"chunk {index} of snapshot {pending.id} is neither stored nor given")
            chunk = encode_chunk(chain_root(pending.namespace), key, tokens, payload, pending.state_format)
            directories.add(self.files.write(key, chunk))
        for directory in sorted(directories) + ([self.chunks_dir] if directories else []):
            fsync_directory(directory)
        now = time.time()
        record = SnapshotRecord(
            id=pending.id, namespace=pending.namespace, cache_key=pending.cache_key, tokens=list(pending.tokens),
            round=pending.round, bytes=pending.state_bytes, generation=0, chunk_tokens=pending.chunk_tokens,
            chunks=list(pending.keys), created=now, last_used=now, state_format=pending.state_format)
        self.manifest.commit(record)
        if record.id in self.records:
            self._unregister(self.records[record.id])
        self._register(record)
        return record

    def touch(self, snapshot_id: str, when: float) -> None:
        record = self.records.get(snapshot_id)
        if record is not None:
            record.last_used = when
            self.manifest.update(record)

    def drop(self, snapshot_id: str, pinned: Iterable[bytes] = ()) -> Optional[SnapshotRecord]:
        """Remove a snapshot from the manifest, then delete the chunks only it referenced."""
        record = self.records.get(snapshot_id)
        if record is None:
            return None
        self.manifest.delete(snapshot_id)
        keep = set(pinned)
        for key in self._unregister(record):
            self.total_bytes -= self.chunk_sizes.pop(key, 0)
            if key not in keep:
                self.files.remove(key)
        return record

    def remove_chunk(self, key: bytes) -> list[SnapshotRecord]:
        """Delete a damaged chunk file and drop every snapshot that names it; returns those."""
        dropped = [r for r in list(self.records.values()) if key in r.chunks]
        for record in dropped:
            self.drop(record.id, pinned=[key])
        self.total_bytes -= self.chunk_sizes.pop(key, 0)
        self.files.remove(key)
        return dropped

    def over_capacity(self) -> list[SnapshotRecord]:
        """Least recently used snapshots to drop so the chunk files fit ``capacity_bytes``."""
        excess = self.total_bytes - self.capacity_bytes
        victims: list[SnapshotRecord] = []
        refs = collections.Counter(self.chunk_refs)
        for record in sorted(self.records.values(), key=lambda r: r.last_used):
            if excess <= 0:
                break
            victims.append(record)
            for key in record.chunks:
                refs[key] -= 1
                excess -= self.chunk_sizes.get(key, 0) if refs[key] == 0 else 0
        return victims

    def clear(self) -> int:
        count = len(self.records)
        for snapshot_id in list(self.records):
            self.drop(snapshot_id)
        self.manifest.clear()
        self.remove_orphans()
        return count

    def read(self, record: SnapshotRecord, chunk_count: int) -> list[tuple[list[int], bytes]]:
        return self.files.read(record, chunk_count)

    def close(self) -> None:
        try:
            self.manifest.close()
        finally:
            self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

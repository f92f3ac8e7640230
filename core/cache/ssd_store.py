"""The SSD store: content-addressed chunk files plus the manifest that names snapshots.

Layout under the store root::

    chunks/<2 hex>/<64 hex chunk key>.kvc    one chunk (format: :mod:`.chunk_format`)
    manifest/                                diskcache database (:mod:`.manifest`)
    lock                                     flock held by the process that writes

Commit boundary: a snapshot's missing chunks are written to a temporary name, fsynced, renamed and
their directory fsynced *before* the manifest transaction that names the snapshot and moves to a
new generation. A crash therefore leaves at worst unreferenced chunk files, which
:meth:`SsdStore.remove_orphans` deletes at the next start. The store itself is single-writer;
:meth:`read` may run on other threads.
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Optional

import attrs

from kvgate.core.cache.chunk_format import BadChunk, chunk_file_size, encode_chunk, read_chunk
from kvgate.core.cache.manifest import Manifest
from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.ssd_records import BadRecord, SnapshotRecord

log = logging.getLogger("kvgate.cache")


class StoreBusy(RuntimeError):
    """Another process holds the store's write lock."""


@attrs.define(eq=False)
class PendingSnapshot:
    """A snapshot to commit: chunk keys, and the payload of every chunk that may be missing."""

    namespace: str
    tokens: list[int]
    cache_key: Optional[str]
    round: int
    chunk_tokens: int
    keys: list[bytes]
    payloads: dict[int, bytes]
    state_bytes: int

    @property
    def id(self) -> str:
        return self.keys[-1].hex()[:32]


class SsdStore:
    def __init__(self, root: Path, chunk_tokens: int, capacity_bytes: int,
                 bytes_per_token: Optional[int] = None, writer: bool = True):
        self.root = Path(root)
        self.chunks_dir = self.root / "chunks"
        self.chunks_dir.mkdir(parents=True, exist_ok=True)
        self.chunk_tokens, self.capacity_bytes, self.bytes_per_token = chunk_tokens, capacity_bytes, bytes_per_token
        self._lock_handle = self._lock() if writer else None
        self.manifest = self._open_manifest(writer)
        self.records: dict[str, SnapshotRecord] = {}
        self.chunk_refs: collections.Counter[bytes] = collections.Counter()
        self.chunk_sizes: dict[bytes, int] = {}
        self.total_bytes = 0
        self.dropped_at_load: list[tuple[str, str]] = []

    def _lock(self):
        handle = open(self.root / "lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StoreBusy(f"the SSD cache at {self.root} is in use by another process") from None
        return handle

    def _open_manifest(self, writer: bool) -> Manifest:
        directory = self.root / "manifest"
        try:
            manifest = Manifest(directory)
            manifest.generation  # noqa: B018 -- reading it proves the database is sound
            return manifest
        except (sqlite3.DatabaseError, BadRecord) as exc:
            if not writer:
                raise
            aside = directory.with_name(f"manifest.corrupt-{int(time.time())}")
            log.warning("SSD cache manifest %s is unreadable (%s); moved to %s, starting empty", directory, exc, aside)
            os.replace(directory, aside)
            return Manifest(directory)

    # --- paths and index --------------------------------------------------------------------------
    def chunk_path(self, key: bytes) -> Path:
        text = key.hex()
        return self.chunks_dir / text[:2] / f"{text}.kvc"

    def _expected_size(self, record: SnapshotRecord, index: int) -> Optional[int]:
        if self.bytes_per_token is None:
            return None
        start, end = record.chunk_span(index)
        return chunk_file_size(end - start, (end - start) * self.bytes_per_token)

    def load_index(self) -> list[SnapshotRecord]:
        """Read every manifest record; drop those whose chunk files are missing or the wrong size."""
        for key, record in self.manifest.records():
            reason = str(record) if isinstance(record, BadRecord) else self._missing_chunk(record)
            if reason:
                self.dropped_at_load.append((key, reason))
                log.warning("SSD cache: dropping snapshot %s at start: %s", key, reason)
                self.manifest.delete_key(key)
            else:
                self._register(record)
        return list(self.records.values())

    def _missing_chunk(self, record: SnapshotRecord) -> str:
        for index, key in enumerate(record.chunks):
            try:
                size = self.chunk_path(key).stat().st_size
            except OSError:
                return f"chunk {index} is missing"
            expected = self._expected_size(record, index)
            if expected is not None and size != expected:
                return f"chunk {index} is {size} bytes, expected {expected}"
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
        keep = set(self.chunk_refs) | set(pinned)
        removed = 0
        for path in self.chunks_dir.glob("*/*"):
            name = path.name
            if _chunk_key_of(name) in keep:
                continue
            path.unlink(missing_ok=True)
            removed += 1
        return removed

    # --- writes (one writer) ----------------------------------------------------------------------
    def commit(self, pending: PendingSnapshot) -> SnapshotRecord:
        """Write the missing chunks durably, then name the snapshot in a new manifest generation."""
        directories = set()
        for index, key in enumerate(pending.keys):
            path = self.chunk_path(key)
            start = index * pending.chunk_tokens
            tokens = pending.tokens[start:start + pending.chunk_tokens]
            if self._chunk_present(path, len(tokens)):
                continue
            payload = pending.payloads.get(index)
            if payload is None:
                raise FileNotFoundError(f"chunk {index} of snapshot {pending.id} is neither stored nor given")
            write_durably(path, encode_chunk(chain_root(pending.namespace), key, tokens, payload))
            directories.add(path.parent)
        for directory in sorted(directories) + ([self.chunks_dir] if directories else []):
            fsync_directory(directory)
        now = time.time()
        record = SnapshotRecord(
            id=pending.id, namespace=pending.namespace, cache_key=pending.cache_key, tokens=list(pending.tokens),
            round=pending.round, bytes=pending.state_bytes, generation=0, chunk_tokens=pending.chunk_tokens,
            chunks=list(pending.keys), created=now, last_used=now)
        self.manifest.commit(record)
        old = self.records.get(record.id)
        if old is not None:
            self._unregister(old)
        self._register(record)
        return record

    def _chunk_present(self, path: Path, token_count: int) -> bool:
        try:
            size = path.stat().st_size
        except OSError:
            return False
        return self.bytes_per_token is None or size == chunk_file_size(token_count, token_count * self.bytes_per_token)

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
                self.chunk_path(key).unlink(missing_ok=True)
        return record

    def over_capacity(self) -> list[SnapshotRecord]:
        """Least recently used snapshots to drop so the chunk files fit ``capacity_bytes``."""
        excess = self.total_bytes - self.capacity_bytes
        victims: list[SnapshotRecord] = []
        if excess <= 0:
            return victims
        refs = collections.Counter(self.chunk_refs)
        for record in sorted(self.records.values(), key=lambda r: r.last_used):
            victims.append(record)
            for key in record.chunks:
                refs[key] -= 1
                if refs[key] == 0:
                    excess -= self.chunk_sizes.get(key, 0)
            if excess <= 0:
                break
        return victims

    def clear(self) -> int:
        count = len(self.records)
        for snapshot_id in list(self.records):
            self.drop(snapshot_id)
        self.manifest.clear()
        self.remove_orphans()
        return count

    # --- reads (any thread) -----------------------------------------------------------------------
    def read(self, record: SnapshotRecord, chunk_count: int) -> list[tuple[list[int], bytes]]:
        """Validated ``(tokens, payload)`` of the first ``chunk_count`` chunks; raises BadChunk."""
        namespace_digest = previous = chain_root(record.namespace)
        out = []
        for index in range(chunk_count):
            key = record.chunks[index]
            start, end = record.chunk_span(index)
            try:
                with open(self.chunk_path(key), "rb") as handle:
                    size = os.fstat(handle.fileno()).st_size
                    out.append(read_chunk(
                        handle, size, namespace_digest=namespace_digest, key=key, previous_key=previous,
                        expected_tokens=record.tokens[start:end], bytes_per_token=self.bytes_per_token,
                        max_tokens=record.chunk_tokens))
            except OSError as exc:
                raise BadChunk(f"chunk {index} unreadable: {exc}") from None
            previous = key
        return out

    def close(self) -> None:
        self.manifest.close()
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None


def _chunk_key_of(name: str) -> Optional[bytes]:
    if not (name.endswith(".kvc") and len(name) == 68):
        return None
    try:
        return bytes.fromhex(name[:64])
    except ValueError:
        return None


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The SSD store: content-addressed chunk files plus the manifest that names snapshots, shared by
any number of workers (processes on one host, or hosts on one shared file system).

Layout under the store root::

    chunks/<2 hex>/<64 hex chunk key>.kvc    one chunk (:mod:`.chunk_format`, :mod:`.chunk_files`)
    manifest/                                diskcache database: records and the ledger (:mod:`.shared`)

Several workers share the store (the design is in the package docstring,
:mod:`kvgate.plugins.cache_ssd`); SQLite's write lock serialises their short manifest transactions.

A store opened with the runtime's ``state_format`` drops, at start, every
snapshot of another record or chunk version or of another state format (logged as stale);
without one (the CLI) it reads any format. All workers on one path should run one build.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import Iterable, Optional

from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd.chunk_files import ChunkFiles, chunk_key_of, remove_path
from kvgate.plugins.cache_ssd.manifest import open_manifest
from kvgate.plugins.cache_ssd.records import PREFIX, BadRecord, SnapshotRecord
from kvgate.plugins.cache_ssd.shared import LAYOUT, Ledger, default_worker_id
from kvgate.plugins.cache_ssd.writes import StoreWrites

log = logging.getLogger("kvgate.cache")
__all__ = ["PendingSnapshot", "SsdStore"]
LEASE_SECONDS = 60.0
ORPHAN_GRACE = 600.0


class SsdStore(StoreWrites):
    """One worker's view of the shared store. In-memory state (``records``: every record of the
    store this worker has seen, ``chunk_refs``, ``holders``) is guarded by ``self.mem``; manifest
    writes run on one thread per worker (the tier's writer), reads and :meth:`refresh` on any."""

    def __init__(self, root: Path, chunk_tokens: int, capacity_bytes: int,
                 state_format: Optional[str] = None, writer: bool = True, worker_id: str = "",
                 lease_seconds: float = LEASE_SECONDS, min_free_bytes: int = 0):
        self.root = Path(root)
        self.files = ChunkFiles(self.root / "chunks", state_format)
        self.chunks_dir = self.files.root
        self.chunk_tokens, self.capacity_bytes, self.state_format = chunk_tokens, capacity_bytes, state_format
        self.min_free_bytes = min_free_bytes  # free space left on the file system: evict below it
        self.worker, self.writer, self.lease_seconds = worker_id or default_worker_id(), writer, lease_seconds
        self.manifest = open_manifest(self.root / "manifest", writer)
        self.ledger = Ledger(self.manifest.cache)
        self.mem = threading.RLock()
        self.records: dict[str, SnapshotRecord] = {}
        self.holders: dict[str, dict[str, float]] = {}
        self.chunk_refs: collections.Counter[bytes] = collections.Counter()
        self.chunk_sizes: dict[bytes, int] = {}
        self.total_bytes = 0
        self.seen_generation = 0
        self.dropped_at_load: list[tuple[str, str]] = []
        if writer:
            self.renew_lease()

    def chunk_path(self, key: bytes) -> Path:
        return self.files.path(key)

    def renew_lease(self) -> None:
        self.ledger.renew(self.worker, self.lease_seconds)

    def others_live(self) -> set[str]:
        return self.ledger.live_workers() - {self.worker}

    # --- index ------------------------------------------------------------------------------------
    def load_index(self, drop_bad: bool = True) -> list[SnapshotRecord]:
        """Read every manifest record; drop (or only report) those that are stale (another version
        or state format) or whose chunks are missing or wrong. Alone on the store, a writer also
        rebuilds the reference counts from what it found."""
        self.seen_generation = self.ledger.generation()
        checked: dict[tuple[bytes, int], str] = {}
        for key, record in self.manifest.records():
            reason = str(record) if isinstance(record, BadRecord) else self._record_problem(record, checked)
            if not reason:
                self._register(record, self.ledger.holders(record.id))
                continue
            self.dropped_at_load.append((key, reason))
            if drop_bad:
                log.warning("SSD cache: dropping snapshot %s at start: %s", key, reason)
                if isinstance(record, SnapshotRecord):  # its files go with the orphans, next
                    self._forget(record.id, force=True, pinned=record.chunks)
                else:
                    self.manifest.delete_key(key)
        if drop_bad and self.writer and (not self.others_live() or self.manifest.cache.get(LAYOUT) != 1):
            with self.mem:
                self.ledger.rebuild(self.chunk_sizes, dict(self.chunk_refs))
        self.total_bytes = self.ledger.total_bytes()
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

    def _register(self, record: SnapshotRecord, holders: dict[str, float]) -> None:
        with self.mem:
            if record.id in self.records:
                self._unregister(self.records[record.id])
            self.records[record.id] = record
            self.holders[record.id] = holders
            mine = holders.get(self.worker)
            if mine is not None:
                record.last_used = mine
            for key in record.chunks:
                if self.chunk_refs[key] == 0:
                    self.chunk_sizes[key] = self.files.size(key)
                self.chunk_refs[key] += 1

    def _unregister(self, record: SnapshotRecord) -> None:
        with self.mem:
            if self.records.get(record.id) is not record:
                return
            del self.records[record.id]
            self.holders.pop(record.id, None)
            for key in record.chunks:
                self.chunk_refs[key] -= 1
                if self.chunk_refs[key] <= 0:
                    del self.chunk_refs[key]
                    self.chunk_sizes.pop(key, None)

    def refresh(self) -> tuple[list[SnapshotRecord], list[SnapshotRecord]]:
        """Catch up with other workers' commits and drops: ``(records added or replaced, records
        gone or replaced)``. Cheap when nothing changed (one read)."""
        generation = self.ledger.generation()
        if generation == self.seen_generation:
            return [], []
        changed = self.ledger.changes(self.seen_generation, generation)
        if changed is None:
            changed = {k[len(PREFIX):] for k in self.manifest.cache.iterkeys()
                       if isinstance(k, str) and k.startswith(PREFIX)} | set(self.records)
        added, removed = [], []
        for snapshot_id in changed:
            stored = self.manifest.get(snapshot_id)
            if stored is not None and self.state_format is not None and stored.state_format != self.state_format:
                stored = None
            with self.mem:
                old = self.records.get(snapshot_id)
                if old is not None and stored is not None and old.generation == stored.generation:
                    self.holders[snapshot_id] = self.ledger.holders(snapshot_id)
                    continue
                if old is not None:
                    self._unregister(old)
                    removed.append(old)
                if stored is not None:
                    self._register(stored, self.ledger.holders(snapshot_id))
                    added.append(stored)
        self.seen_generation, self.total_bytes = generation, self.ledger.total_bytes()
        return added, removed

    def remove_orphans(self, pinned: Iterable[bytes] = ()) -> int:
        """Delete temporary files and chunk files nothing references (left by a crash); while
        other workers are live, only those older than ``ORPHAN_GRACE``. Counts are checked in one
        transaction, so that no commit revives a file between the check and the deletion."""
        older_than = time.time() - ORPHAN_GRACE if self.others_live() else float("inf")
        removed = 0
        strays = self.files.strays(set(pinned), older_than)
        with self.manifest.transact():
            for path in strays:
                key = chunk_key_of(path.name)
                if key is None or not self.ledger.referenced(key):
                    remove_path(path)
                    removed += 1
        return removed

    def read(self, record: SnapshotRecord, chunk_count: int) -> list[tuple[list[int], bytes]]:
        return self.files.read(record, chunk_count)

    def close(self) -> None:
        """End this worker's lease (its records become evictable by others) and close."""
        try:
            if self.writer:
                self.ledger.end(self.worker)
        finally:
            self.manifest.close()

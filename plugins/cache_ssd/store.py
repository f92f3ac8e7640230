"""The SSD store: content-addressed chunk files plus the manifest that names snapshots, shared by
any number of workers (processes on one host, or hosts on one shared file system).

Layout under the store root::

    chunks/<2 hex>/<64 hex chunk key>.kvc    one chunk (:mod:`.chunk_format`, :mod:`.chunk_files`)
    manifest/                                diskcache database: records and the ledger (:mod:`.shared`)

Sharing (no exclusive lock; SQLite's write lock serialises the short manifest transactions):

- **Content addressing.** A chunk key is a hash chain over namespace and tokens, so two workers
  computing one prefix store one file; a record is keyed by its last chunk key, so they also
  share one record.
- **Reference counts.** ``ref:<chunk>`` counts the records naming a chunk, changed in the same
  transaction as the records. A file is deleted only in a transaction that finds its count zero,
  *after* the transaction that dropped the count committed: a crash leaves at worst an
  unreferenced file, never a record naming a missing one.
- **Holders and leases.** Every worker holds a lease (renewed by its writer thread, ended at
  close) and is a holder of the records it committed or restored. Dropping a record (eviction,
  round limit) only removes the worker as holder; the record and its chunks go when no *live*
  holder is left. Eviction considers only records the worker holds alone or whose holders'
  leases expired (a dead worker's records are adopted). So one worker's eviction never removes a
  chunk another live worker's records reference. Damage (a chunk that fails validation) is the
  exception: it drops every record naming the chunk, whoever holds it.
- **Commit order.** A snapshot's missing chunks are written to a unique temporary name, fsynced,
  renamed and their directories fsynced; then one transaction re-checks each chunk file (another
  worker may have deleted one it found unreferenced meanwhile: rewritten, or the commit fails),
  stores the record, counts new references, adds the holder and moves to a new generation.
- **Seeing others' writes.** Each generation logs the snapshot it changed (``log:<gen>``);
  :meth:`SsdStore.refresh` reads the records changed since the generation it last saw.
- **Orphans.** At start, chunk files with no reference and temporary files are deleted, but
  while other workers hold live leases only those older than ``ORPHAN_GRACE`` seconds (a file
  another worker is writing is younger), each checked against its count in a transaction.

Leases compare wall clocks: hosts sharing a store need synchronised clocks (``LEASE_SECONDS``
tolerates small skew). A store opened with the runtime's ``state_format`` drops, at start, every
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

from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd.chunk_files import ChunkFiles, chunk_key_of, fsync_directory, remove_path
from kvgate.plugins.cache_ssd.chunk_format import encode_chunk
from kvgate.plugins.cache_ssd.manifest import open_manifest
from kvgate.plugins.cache_ssd.records import PREFIX, BadRecord, SnapshotRecord
from kvgate.plugins.cache_ssd.shared import LAYOUT, Ledger, default_worker_id

log = logging.getLogger("kvgate.cache")
__all__ = ["PendingSnapshot", "SsdStore"]
LEASE_SECONDS = 60.0
ORPHAN_GRACE = 600.0


class SsdStore:
    """One worker's view of the shared store. In-memory state (``records``: every record of the
    store this worker has seen, ``chunk_refs``, ``holders``) is guarded by ``self.mem``; manifest
    writes run on one thread per worker (the tier's writer), reads and :meth:`refresh` on any."""

    def __init__(self, root: Path, chunk_tokens: int, capacity_bytes: int,
                 state_format: Optional[str] = None, writer: bool = True, worker_id: str = "",
                 lease_seconds: float = LEASE_SECONDS):
        self.root = Path(root)
        self.files = ChunkFiles(self.root / "chunks", state_format)
        self.chunks_dir = self.files.root
        self.chunk_tokens, self.capacity_bytes, self.state_format = chunk_tokens, capacity_bytes, state_format
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
        other workers are live, only those older than ``ORPHAN_GRACE``."""
        older_than = time.time() - ORPHAN_GRACE if self.others_live() else float("inf")
        removed = 0
        for path in self.files.strays(set(pinned), older_than):
            key = chunk_key_of(path.name)
            with self.manifest.transact():
                if key is not None and self.ledger.referenced(key):
                    continue
                remove_path(path)
                removed += 1
        return removed

    # --- writes (the worker's writer thread) -------------------------------------------------------
    def commit(self, pending: PendingSnapshot) -> SnapshotRecord:
        """Write the missing chunks durably, then name the snapshot in a new manifest generation."""
        written = self._write_missing(pending, range(len(pending.keys)))
        now = time.time()
        record = SnapshotRecord(
            id=pending.id, namespace=pending.namespace, cache_key=pending.cache_key, tokens=list(pending.tokens),
            round=pending.round, bytes=pending.state_bytes, generation=0, chunk_tokens=pending.chunk_tokens,
            chunks=list(pending.keys), created=now, last_used=now, state_format=pending.state_format)
        with self.manifest.transact():
            self._write_missing(pending, [i for i in range(len(pending.keys)) if i not in written])
            if self.manifest.get(record.id) is None:
                for key in record.chunks:
                    self.ledger.incref(key, self.files.size(key))
            holders = self.ledger.holders(record.id)
            holders[self.worker] = now
            self.ledger.set_holders(record.id, holders)
            record.generation = self.ledger.advance(record.id)
            self.manifest.put(record)
        self._register(record, holders)
        self.total_bytes = self.ledger.total_bytes()
        return record

    def _write_missing(self, pending: PendingSnapshot, indexes: Iterable[int]) -> set[int]:
        """Write (and fsync, with their directories) the chunks among ``indexes`` that are missing
        or unusable on disk; returns their indexes. Raises FileNotFoundError for one whose payload
        the snapshot does not carry."""
        written, directories = set(), set()
        for index in indexes:
            key, tokens = pending.keys[index], pending.chunk_tokens_at(index)
            if not self.files.header_problem(key, len(tokens)):
                continue
            payload = pending.payloads.get(index)
            if payload is None:
                raise FileNotFoundError(f"chunk {index} of snapshot {pending.id} is neither stored nor given")
            chunk = encode_chunk(chain_root(pending.namespace), key, tokens, payload, pending.state_format)
            directories.add(self.files.write(key, chunk))
            written.add(index)
        for directory in sorted(directories) + ([self.chunks_dir] if directories else []):
            fsync_directory(directory)
        return written

    def touch(self, snapshot_id: str, when: float) -> None:
        """This worker used the snapshot at ``when``: it becomes (or stays) one of its holders."""
        with self.manifest.transact():
            if self.manifest.get(snapshot_id) is None:
                return
            holders = self.ledger.holders(snapshot_id)
            holders[self.worker] = when
            self.ledger.set_holders(snapshot_id, holders)
        with self.mem:
            record = self.records.get(snapshot_id)
            if record is not None:
                record.last_used = when
                self.holders[snapshot_id] = holders

    def drop(self, snapshot_id: str, pinned: Iterable[bytes] = (), force: bool = False) -> Optional[SnapshotRecord]:
        """This worker no longer keeps the snapshot; it leaves the store (with the chunks only it
        referenced, except ``pinned``) when no other live worker holds it, or at once when
        ``force`` (damage). Returns the record when it left the store."""
        record = self.records.get(snapshot_id)
        if record is None or not self._forget(snapshot_id, force=force, pinned=pinned):
            return None
        return record

    def _forget(self, snapshot_id: str, force: bool, pinned: Iterable[bytes] = ()) -> bool:
        """Release ``snapshot_id``; True when its record left the store (always when ``force``).
        Chunk files whose count fell to zero are deleted after that transaction commits, each
        in a transaction that finds it still unreferenced (a commit may have revived it)."""
        with self.manifest.transact():
            stored = self.manifest.get(snapshot_id)
            holders = self.ledger.holders(snapshot_id)
            holders.pop(self.worker, None)
            live = self.ledger.live_workers()
            if stored is not None and not force and any(worker in live for worker in holders):
                self.ledger.set_holders(snapshot_id, holders)
                with self.mem:
                    self.holders[snapshot_id] = holders
                return False
            freed = [key for key in (stored.chunks if stored else []) if self.ledger.decref(key)]
            self.manifest.delete(snapshot_id)
            self.ledger.forget_holders(snapshot_id)
            self.ledger.advance(snapshot_id)
        old = self.records.get(snapshot_id)
        if old is not None:
            self._unregister(old)
        keep = set(pinned)
        for key in freed:
            if key not in keep:
                with self.manifest.transact():
                    if not self.ledger.referenced(key):
                        self.files.remove(key)
        self.total_bytes = self.ledger.total_bytes()
        return True

    def remove_chunk(self, key: bytes) -> list[SnapshotRecord]:
        """Delete a damaged chunk file and drop every snapshot that names it; returns those."""
        dropped = [r for r in list(self.records.values()) if key in r.chunks]
        for record in dropped:
            self._forget(record.id, force=True, pinned=[key])
        with self.manifest.transact():
            self.ledger.forget_ref(key)
            self.files.remove(key)
        self.total_bytes = self.ledger.total_bytes()
        return dropped

    def evictable(self, record: SnapshotRecord, live: set[str]) -> bool:
        """Whether this worker may evict ``record``: no other live worker holds it."""
        return not any(worker in live and worker != self.worker for worker in self.holders.get(record.id, {}))

    def over_capacity(self) -> list[SnapshotRecord]:
        """Least recently used snapshots to drop so the chunk files fit ``capacity_bytes``: among
        those this worker holds alone and those only dead workers held."""
        self.total_bytes = self.ledger.total_bytes()
        excess = self.total_bytes - self.capacity_bytes
        if excess <= 0:
            return []
        live = self.ledger.live_workers()
        with self.mem:
            refs = collections.Counter(self.chunk_refs)
            candidates = sorted((r for r in self.records.values() if self.evictable(r, live)),
                                key=lambda r: r.last_used)
            victims: list[SnapshotRecord] = []
            for record in candidates:
                if excess <= 0:
                    break
                victims.append(record)
                for key in record.chunks:
                    refs[key] -= 1
                    excess -= self.chunk_sizes.get(key, 0) if refs[key] == 0 else 0
        return victims

    def clear(self) -> int:
        """Drop every snapshot, whoever holds it (``kvgate cache clear``)."""
        self.refresh()
        count = len(self.records)
        for snapshot_id in list(self.records):
            self._forget(snapshot_id, force=True)
        self.manifest.clear()
        self.remove_orphans()
        return count

    def read(self, record: SnapshotRecord, chunk_count: int) -> list[tuple[list[int], bytes]]:
        return self.files.read(record, chunk_count)

    def close(self) -> None:
        """End this worker's lease (its records become evictable by others) and close."""
        try:
            if self.writer:
                self.ledger.end(self.worker)
        finally:
            self.manifest.close()

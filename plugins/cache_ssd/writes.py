"""The write half of :class:`kvgate.plugins.cache_ssd.store.SsdStore` (a mixin): commit, touch,
drop, eviction choice and damage removal, each a short manifest transaction on the shared store
(the rules are in the package docstring, :mod:`kvgate.plugins.cache_ssd`). Runs on the worker's
writer thread.
"""

from __future__ import annotations

import collections
import time
from typing import Callable, Iterable, Optional

from kvgate.core.cache.namespace import chain_root
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd import disk_space
from kvgate.plugins.cache_ssd.chunk_files import fsync_directory
from kvgate.plugins.cache_ssd.chunk_format import encode_chunk
from kvgate.plugins.cache_ssd.records import SnapshotRecord


class StoreWrites:
    def commit(self, pending: PendingSnapshot) -> SnapshotRecord:
        """Write the missing chunks durably, then name the snapshot in a new manifest generation."""
        self._write_missing(pending)  # outside the lock: the slow part
        now = time.time()
        record = SnapshotRecord(
            id=pending.id, namespace=pending.namespace, cache_key=pending.cache_key, tokens=list(pending.tokens),
            round=pending.round, bytes=pending.state_bytes, generation=0, chunk_tokens=pending.chunk_tokens,
            chunks=list(pending.keys), created=now, last_used=now, state_format=pending.state_format)
        with self.manifest.transact():
            self._write_missing(pending)  # again: another worker may have deleted one it found unreferenced
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

    def _write_missing(self, pending: PendingSnapshot) -> None:
        """Write (and fsync, with their directories) the snapshot's chunks that are missing or
        unusable on disk. Raises FileNotFoundError for one whose payload the snapshot lacks."""
        directories = set()
        for index in range(len(pending.keys)):
            key, tokens = pending.keys[index], pending.chunk_tokens_at(index)
            if not self.files.header_problem(key, len(tokens)):
                continue
            payload = pending.payloads.get(index)
            if payload is None:
                raise FileNotFoundError(f"chunk {index} of snapshot {pending.id} is neither stored nor given")
            chunk = encode_chunk(chain_root(pending.namespace), key, tokens, payload, pending.state_format)
            directories.add(self.files.write(key, chunk))
        for directory in sorted(directories) + ([self.chunks_dir] if directories else []):
            fsync_directory(directory)

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
        Chunk files whose count fell to zero are deleted after that transaction commits, in one
        that finds each still unreferenced (a commit may have revived it meanwhile)."""
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
        freed = [key for key in freed if key not in set(pinned)]
        if freed:
            with self.manifest.transact():
                for key in freed:
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

    def over_capacity(self, kept: Callable[[SnapshotRecord], bool] = lambda record: False) -> list[SnapshotRecord]:
        """Least recently used snapshots to drop so the chunk files fit ``capacity_bytes`` and the
        file system keeps ``min_free_bytes`` free: among those this worker holds alone and those
        only dead workers held, never one ``kept`` holds (a retained prefix)."""
        self.total_bytes = self.ledger.total_bytes()
        excess = self.total_bytes - self.capacity_bytes
        if self.min_free_bytes:
            excess = max(excess, self.min_free_bytes - disk_space.free_bytes(self.root))
        if excess <= 0:
            return []
        live = self.ledger.live_workers()
        with self.mem:
            refs = collections.Counter(self.chunk_refs)
            candidates = sorted((r for r in self.records.values() if self.evictable(r, live) and not kept(r)),
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

    def sweep_unreferenced(self, keys: Iterable[bytes], pinned: Iterable[bytes]) -> int:
        """Delete the chunk files of ``keys`` that no record references and nothing pins: what a
        failed commit wrote before it failed (a full disk), deleted at once even while other
        workers are live (one that wrote the same chunk meanwhile re-checks it when it commits).
        Then the other orphans (:meth:`remove_orphans`). Returns the files deleted."""
        keep, removed = set(pinned), 0
        with self.manifest.transact():
            for key in set(keys) - keep:
                if not self.ledger.referenced(key) and self.files.path(key).exists():
                    self.files.remove(key)
                    removed += 1
        return removed + self.remove_orphans(keep)

    def clear(self) -> int:
        """Drop every snapshot, whoever holds it (``kvgate cache clear``)."""
        self.refresh()
        count = len(self.records)
        for snapshot_id in list(self.records):
            self._forget(snapshot_id, force=True)
        self.manifest.clear()
        self.remove_orphans()
        return count

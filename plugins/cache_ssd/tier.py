"""The SSD tier, a backup tier (:class:`kvgate.core.cache.tiers.BackupTier`): an
:class:`SsdStore`, its index, and a writer thread that commits backups.

The engine thread exports state (the runtime is not thread-safe) and submits a
:class:`PendingSnapshot`; the writer thread writes chunks, commits the manifest, applies the
round limit and the capacity bound, and renews the worker's lease on the shared store. Chunks
referenced by a queued snapshot are pinned so that a capacity drop cannot delete them before that
snapshot commits. Reads (:meth:`read`) run on request worker threads. A lookup first catches up
with what other workers committed or dropped since (:meth:`SsdStore.refresh`).
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

import diskcache

from kvgate.core.cache.metrics import CacheMetrics
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.core.cache.tiers import TierUnavailable
from kvgate.core.cache.disk_state import StateUnusable, open_or_set_aside
from kvgate.plugins.cache_ssd.index import SsdIndex
from kvgate.plugins.cache_ssd.metrics import SsdMetrics
from kvgate.plugins.cache_ssd.records import SnapshotRecord
from kvgate.plugins.cache_ssd.retention import RetainedSnapshots
from kvgate.plugins.cache_ssd.store import SsdStore

log = logging.getLogger("kvgate.cache")
MAX_PENDING_BYTES = 512 * 1024 * 1024


class SsdTier:
    def __init__(self, root: Path, chunk_tokens: int, capacity_bytes: int, state_format: Optional[str],
                 prefix_rounds: int, max_pending_bytes: int = MAX_PENDING_BYTES, worker_id: str = "",
                 min_free_bytes: int = 0):
        self.chunk_tokens, self.prefix_rounds, self.max_pending_bytes = chunk_tokens, prefix_rounds, max_pending_bytes
        self.store, records, self.orphans_removed = open_store(root, chunk_tokens, capacity_bytes, state_format,
                                                               worker_id, min_free_bytes)
        self.name = "ssd"
        self.metrics = SsdMetrics()
        self.lock = threading.Condition(threading.RLock())
        self.index = SsdIndex()
        self.pins: collections.Counter[bytes] = collections.Counter()
        self.retained = RetainedSnapshots()
        self.pending_bytes = 0
        for record in records:
            self.index.add(record)
        self.jobs: queue.Queue = queue.Queue()
        self.writer = threading.Thread(target=self._run, name="kvgate-ssd-writer", daemon=True)
        self.writer.start()

    def bind(self, metrics: CacheMetrics, name: str) -> None:
        self.name, self.metrics = name, SsdMetrics(metrics, name)
        self._update_gauges()

    # --- engine thread ------------------------------------------------------------------------------
    def longest(self, namespace: str, tokens: Sequence[int]):
        with self.lock:
            return self.index.longest(namespace, tokens)

    def exact(self, namespace: str, cache_key: Optional[str], tokens: Sequence[int]):
        """Called first on every lookup that reaches this tier: catches up with other workers."""
        with self.lock:
            self._catch_up()
            return self.index.exact(namespace, cache_key, tokens)

    def _catch_up(self) -> None:
        try:
            added, removed = self.store.refresh()
        except Exception as exc:  # a busy or damaged manifest: look up what is known
            log.warning("SSD cache: reading other workers' snapshots failed: %s", exc)
            return
        for record in removed:
            self.index.remove(record)
        for record in added:
            self.index.add(record)

    def pin_known(self, keys: Sequence[bytes]) -> set[int]:
        """Pin ``keys`` (no drop deletes them until the snapshot is submitted and committed, or
        :meth:`unpin`) and return the indexes already stored or queued: those need no export."""
        with self.lock:
            known = {i for i, key in enumerate(keys) if key in self.store.chunk_refs or self.pins[key] > 0}
            self.pins.update(keys)
            return known

    def unpin(self, keys: Sequence[bytes]) -> None:
        with self.lock:
            self.pins.subtract(keys)

    def submit(self, pending: PendingSnapshot, wait: bool) -> bool:
        """Queue a pinned snapshot; when the queue holds too many bytes, wait or give up (unpinned)."""
        size = sum(len(p) for p in pending.payloads.values())
        with self.lock:
            while self.pending_bytes and self.pending_bytes + size > self.max_pending_bytes:
                if not wait:
                    self.pins.subtract(pending.keys)
                    return False
                self.lock.wait(timeout=1.0)
            self.pending_bytes += size
        self.jobs.put(("commit", pending, size))
        return True

    def retain(self, namespace: str, tokens: Sequence[int], seconds: float) -> None:
        self.retained.keep(namespace, tokens, seconds)

    def touch(self, record: SnapshotRecord) -> None:
        record.last_used = time.time()
        self.jobs.put(("touch", record.id, record.last_used))

    # --- worker threads ---------------------------------------------------------------------------
    def read(self, record: SnapshotRecord, tokens_needed: int) -> list[tuple[list[int], bytes]]:
        return self.store.read(record, -(-tokens_needed // record.chunk_tokens))

    def drop_bad(self, record: SnapshotRecord, reason: str, bad_key: Optional[bytes] = None) -> None:
        """Forget a snapshot that failed validation; the damaged chunk goes too, with every
        snapshot that names it (a later commit must never reuse a damaged file)."""
        log.warning("SSD cache: dropping damaged snapshot %s (%d tokens): %s", record.id, len(record.tokens), reason)
        self.metrics.bad_snapshots.inc()
        with self.lock:
            self.index.remove(record)
        self.jobs.put(("drop", record, bad_key))

    # --- writer thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        lower_own_priority()
        renew_every, renewed = self.store.lease_seconds / 3, time.monotonic()
        while True:
            try:
                kind, subject, extra = self.jobs.get(timeout=renew_every)
            except queue.Empty:
                kind, subject, extra = "renew", None, None
            try:
                if time.monotonic() - renewed >= renew_every or kind == "renew":
                    self.store.renew_lease()
                    renewed = time.monotonic()
                if kind == "stop":
                    return
                if kind == "flush":
                    subject.set()
                elif kind == "commit":
                    self._commit(subject, extra)
                elif kind == "touch":
                    self.store.touch(subject, extra)
                elif kind == "drop":
                    self._drop_damaged(subject, extra)
            except Exception as exc:  # the writer must survive a bad disk
                log.warning("SSD cache writer: %s of %s failed: %s", kind, getattr(subject, "id", subject), exc)
                self.metrics.backup_failures.inc()

    def _commit(self, pending: PendingSnapshot, size: int) -> None:
        committed = False
        try:
            record = self.store.commit(pending)
            committed = True
            self.metrics.backups.inc()
            self.metrics.backup_bytes.inc(size)
            with self.lock:
                self.index.add(record)
                for old in self.index.superseded(record, self.prefix_rounds):
                    if not self.retained.holds(old):
                        self._drop_locked(old)
                self._evict_over_capacity()
        finally:
            with self.lock:
                self.pins.subtract(pending.keys)
                self.pending_bytes -= size
                self.lock.notify_all()
            if not committed:
                self._clean_up_after_failure(pending)
            self._update_gauges()

    def _evict_over_capacity(self) -> None:
        """Drop least recently used snapshots past ``ssd_bytes`` or below ``ssd_min_free_bytes``."""
        for victim in self.store.over_capacity(self.retained.holds):
            self._drop_locked(victim)
            self.metrics.evictions.inc()

    def _clean_up_after_failure(self, pending: PendingSnapshot) -> None:
        """After a failed commit (a full disk, most often), delete the chunk files it wrote that
        nothing references, and make room by the eviction rules: left there, they would keep the
        disk full and every later commit failing."""
        try:
            with self.lock:
                removed = self.store.sweep_unreferenced(pending.keys, pinned=+self.pins)
                self._evict_over_capacity()
            if removed:
                log.warning("SSD cache: removed %d unreferenced chunk files after a failed backup", removed)
        except Exception as exc:  # the commit's own error is the one reported
            log.warning("SSD cache: cleaning up after a failed backup failed too: %s", exc)

    def _drop_damaged(self, record: SnapshotRecord, bad_key: Optional[bytes]) -> None:
        with self.lock:
            if self.store.records.get(record.id) is record:  # not re-committed meanwhile
                self.store.drop(record.id, pinned=+self.pins, force=True)
            if bad_key is not None:
                for other in self.store.remove_chunk(bad_key):
                    self.index.remove(other)
        self._update_gauges()

    def _drop_locked(self, record: SnapshotRecord) -> None:
        """Drop ``record`` for this worker; it stays indexed while another live worker holds it."""
        if self.store.drop(record.id, pinned=+self.pins) is not None:
            self.index.remove(record)

    def _update_gauges(self) -> None:
        self.metrics.ssd_bytes.set(self.store.total_bytes)
        self.metrics.ssd_snapshots.set(len(self.store.records))

    def flush(self, timeout: float = 120.0) -> bool:
        done = threading.Event()
        self.jobs.put(("flush", done, None))
        return done.wait(timeout)

    def stats(self) -> dict:
        with self.lock:
            return {"snapshots": len(self.store.records), "bytes": self.store.total_bytes,
                    "capacity_bytes": self.store.capacity_bytes, "pending_bytes": self.pending_bytes,
                    "generation": self.store.manifest.generation, "worker": self.store.worker,
                    "other_live_workers": len(self.store.others_live()), "retained": self.retained.count()}

    def close(self) -> None:
        if self.writer.is_alive():
            self.flush()
            self.jobs.put(("stop", None, None))
            self.writer.join(timeout=60)
        self.store.close()


def open_store(root: Path, chunk_tokens: int, capacity_bytes: int, state_format: Optional[str], worker_id: str = "",
               min_free_bytes: int = 0):
    """``(store, its valid records, orphans removed)``, opened and checked. A damaged store is moved
    aside and replaced by an empty one; an unwritable one raises TierUnavailable
    (:func:`kvgate.core.cache.disk_state.open_or_set_aside`)."""
    def checked():
        store = SsdStore(root, chunk_tokens, capacity_bytes, state_format, worker_id=worker_id,
                         min_free_bytes=min_free_bytes)
        try:
            return store, store.load_index(), store.remove_orphans()
        except BaseException:
            store.close()
            raise

    def attempt():
        try:
            return checked()
        except (diskcache.Timeout, sqlite3.OperationalError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" not in str(exc):
                raise
            # another worker held the shared manifest's write lock too long: busy, not damaged
            raise TierUnavailable(f"the shared SSD cache at {root} stayed busy: {exc!r}") from None

    try:
        return open_or_set_aside(Path(root), attempt, "SSD cache", passthrough=(TierUnavailable,))
    except StateUnusable as exc:
        raise TierUnavailable(str(exc)) from None


WRITER_NICENESS = 10  # about a tenth of a core's share against the forward's threads, never starved


def lower_own_priority() -> None:
    """Run the calling thread at a low CPU priority (Linux applies nice values per thread).

    Backups are background work: a writer competing for a core with the forward's threads delays
    every operation of a multi-threaded forward, not just one.
    """
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(WRITER_NICENESS, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError):  # not Linux, or not permitted: run at normal priority
        pass

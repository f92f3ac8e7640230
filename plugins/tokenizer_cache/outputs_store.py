"""The output-ids registry kept on disk beside the SSD tier, so that a restarted server, or another
worker on the same store, resolves a resent reply to the ids the model sampled (:mod:`.outputs`).

One SQLite database, ``<ssd_path>/output_ids/registry.sqlite`` (:mod:`.outputs_db`), shared by
every worker on that path as the SSD manifest is, bounded in bytes as a whole (segment text + 4 per
id, as the in-memory registry counts), least recently used out first.

Outputs are registered on the server's event loop, so nothing here touches the disk there: an
added row waits in memory (and is read from there) until a writer thread has written it, with the
last-use times of the rows read meanwhile; at exit the writer is given a few seconds to finish.

Disk is untrusted: a database that fails to open or validate is moved aside with a warning and an
empty one opened (:func:`kvgate.core.cache.disk_state.open_or_set_aside`); an error while serving
is logged and read as a miss; a row is used only where its ids decode to its segment's text (the
caller checks, :class:`.prompt_cache.PromptCache`). The database opens at first use, after the SSD
tier has checked (and perhaps set aside) its directory.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from pathlib import Path
from typing import Optional

from kvgate.core.cache.disk_state import StateUnusable, open_or_set_aside
from kvgate.plugins.tokenizer_cache.outputs_db import OutputsTable, Row, connect, key_of, pack, unpack

log = logging.getLogger(__name__)
EXIT_FLUSH_SECONDS = 5.0


class OutputIdsStore:
    """The calls of :class:`.outputs.OutputIdsRegistry`, on the shared database under ``root``."""

    def __init__(self, root: Path, max_bytes: int):
        self.root, self.max_bytes = Path(root), max_bytes
        self._table: Optional[OutputsTable] = None
        self._unusable = False
        self._open_lock, self._lock = threading.Lock(), threading.Lock()
        self._pending: dict[bytes, Row] = {}  # added, not written yet
        self._touched: dict[bytes, float] = {}  # key -> last use, not written yet
        self._wake, self._idle = threading.Event(), threading.Event()
        self._idle.set()
        self._writer: Optional[threading.Thread] = None
        atexit.register(self.flush, EXIT_FLUSH_SECONDS)

    def __len__(self) -> int:
        """Rows on disk plus those waiting to be written (approximate while rows are written)."""
        row = self._query("SELECT count(*) FROM outputs")
        return (row[0] if row else 0) + len(self._pending)

    @property
    def used_bytes(self) -> int:
        row = self._query("SELECT total(cost) FROM outputs")
        return (int(row[0]) if row else 0) + sum(pending[4] for pending in list(self._pending.values()))

    def holds(self, namespace: str) -> bool:
        if any(row[1] == namespace for row in list(self._pending.values())):
            return True
        return self._query("SELECT 1 FROM outputs WHERE namespace = ? LIMIT 1", (namespace,)) is not None

    def add(self, namespace: str, segment: str, ids: list[int]) -> None:
        value = pack(ids)
        cost = len(segment.encode("utf-8", "surrogatepass")) + len(value)
        if cost <= self.max_bytes:
            key = key_of(namespace, segment)
            self._queue(lambda: self._pending.__setitem__(key, (key, namespace, segment, value, cost, time.time())))

    def get(self, namespace: str, segment: str) -> Optional[list[int]]:
        key = key_of(namespace, segment)
        row = self._pending.get(key) or self._query("SELECT * FROM outputs WHERE key = ?", (key,))
        if row is None or (row[1], row[2]) != (namespace, segment) or len(row[3]) % 4:
            return None
        self._queue(lambda: self._touched.__setitem__(key, time.time()))
        return unpack(row[3])

    def discard(self, namespace: str, segment: str) -> None:
        """Drop a row the caller found invalid (its ids do not decode to its text)."""
        key = key_of(namespace, segment)
        self._pending.pop(key, None)
        table = self._open()
        if table is not None:
            table.delete(key)

    def clear(self) -> None:
        self.flush(EXIT_FLUSH_SECONDS)
        table = self._open()
        if table is not None:
            table.delete(None)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the writer to write what waits; whether it did."""
        return self._idle.wait(timeout)

    def _query(self, sql: str, args: tuple = ()) -> Optional[tuple]:
        table = self._open()
        return table.one(sql, args) if table is not None else None

    def _queue(self, change) -> None:
        with self._lock:
            change()
            self._idle.clear()
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="output-ids-writer", daemon=True)
                self._writer.start()
        self._wake.set()

    def _write_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                self._write_waiting()
            except Exception:  # the writer must outlive any surprise; what waits is retried
                log.exception("output ids registry: the writer failed")

    def _write_waiting(self) -> None:
        with self._lock:
            rows, touched = list(self._pending.values()), [(t, k) for k, t in self._touched.items()]
            self._touched.clear()
        table = self._open()
        if table is not None:
            table.write(rows, touched, self.max_bytes)
        with self._lock:
            for row in rows:
                if self._pending.get(row[0]) is row:
                    del self._pending[row[0]]
            if not self._pending and not self._touched:
                self._idle.set()

    def _open(self) -> Optional[OutputsTable]:
        with self._open_lock:
            if self._table is None and not self._unusable:
                path = self.root / "registry.sqlite"
                try:
                    self._table = open_or_set_aside(self.root, lambda: OutputsTable(connect(path), path),
                                                    "output ids registry")
                except StateUnusable as exc:
                    log.warning("%s; resent replies are tokenized canonically", exc)
                    self._unusable = True
            return self._table

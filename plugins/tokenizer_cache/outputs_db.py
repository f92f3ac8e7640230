"""The SQLite database under the output-ids store (:mod:`.outputs_store`): opening and validating
it, and the statements on its one table.

``outputs`` holds a row per (namespace, segment), keyed by a hash of both, with the ids as
little-endian uint32, the bytes it counts (segment text + 4 per id) and the wall-clock time of its
last use. The file is 0600 and in WAL mode, so workers on one directory read while one writes.
Every statement runs under one lock; an SQLite error is logged and read as "nothing".
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import sys
import threading
from array import array
from pathlib import Path
from typing import Iterable, Optional

log = logging.getLogger(__name__)
FORMAT = 1  # PRAGMA user_version of this layout
SCHEMA = ("CREATE TABLE IF NOT EXISTS outputs (key BLOB PRIMARY KEY, namespace TEXT NOT NULL, "
          "segment TEXT NOT NULL, ids BLOB NOT NULL, cost INTEGER NOT NULL, used REAL NOT NULL)",
          "CREATE INDEX IF NOT EXISTS outputs_used ON outputs (used)",
          "CREATE INDEX IF NOT EXISTS outputs_namespace ON outputs (namespace)")
Row = tuple  # (key, namespace, segment, ids blob, cost, used), the table's columns in order


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating, 0600) and validate the database; raises on damage or another format."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)
    db = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # a row lost to a power cut is only a lost hit
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, FORMAT):
            raise sqlite3.DatabaseError(f"registry format {version}, not {FORMAT}")
        if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("PRAGMA quick_check failed")
        with db:
            db.execute("BEGIN IMMEDIATE")
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {FORMAT}")
        return db
    except BaseException:
        db.close()
        raise


class OutputsTable:
    """The statements on an open database, each in its own transaction, under one lock."""

    def __init__(self, db: sqlite3.Connection, path: Path):
        self.db, self.path = db, path
        self._lock = threading.Lock()

    def one(self, sql: str, args: tuple = ()) -> Optional[tuple]:
        return self._run(lambda: self.db.execute(sql, args).fetchone(), write=False)

    def write(self, rows: Iterable[Row], touched: Iterable[tuple[float, bytes]], max_bytes: int) -> None:
        """Insert ``rows``, set the last use of ``touched`` keys, then evict down to ``max_bytes``."""
        def apply() -> None:
            self.db.executemany("INSERT OR REPLACE INTO outputs VALUES (?, ?, ?, ?, ?, ?)", rows)
            self.db.executemany("UPDATE outputs SET used = max(used, ?) WHERE key = ?", touched)
            self._evict(max_bytes)
        self._run(apply, write=True)

    def delete(self, key: Optional[bytes]) -> None:
        """Drop the row of ``key``, or every row."""
        if key is None:
            self._run(lambda: self.db.execute("DELETE FROM outputs"), write=True)
        else:
            self._run(lambda: self.db.execute("DELETE FROM outputs WHERE key = ?", (key,)), write=True)

    def _evict(self, max_bytes: int) -> None:
        over = self.db.execute("SELECT total(cost) FROM outputs").fetchone()[0] - max_bytes
        victims = []
        for key, cost in self.db.execute("SELECT key, cost FROM outputs ORDER BY used") if over > 0 else ():
            victims.append((key,))
            over -= cost
            if over <= 0:
                break
        self.db.executemany("DELETE FROM outputs WHERE key = ?", victims)

    def _run(self, work, write: bool):
        with self._lock:
            try:
                with self.db:  # commits, or rolls back on an error
                    if write:
                        self.db.execute("BEGIN IMMEDIATE")  # every worker's writes serialise here
                    return work()
            except (sqlite3.Error, OverflowError) as exc:
                log.warning("output ids registry %s: %s: %s (read as a miss)", self.path, type(exc).__name__, exc)
                return None


def key_of(namespace: str, segment: str) -> bytes:
    text = namespace.encode("utf-8", "surrogatepass") + b"\0" + segment.encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).digest()


def pack(ids: list[int]) -> bytes:
    value = array("I", ids)
    if sys.byteorder == "big":
        value.byteswap()
    return value.tobytes()


def unpack(blob: bytes) -> list[int]:
    value = array("I")
    value.frombytes(blob)
    if sys.byteorder == "big":
        value.byteswap()
    return value.tolist()

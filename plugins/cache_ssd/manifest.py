"""The SSD manifest: snapshot records and the committed generation in a ``diskcache`` database.

Values are JSON bytes (never pickles: a value stored as a pickle is refused, since disk is
untrusted). Writes use SQLite's FULL synchronous mode; one transaction moves the manifest to a new
generation together with the snapshot it commits. Several workers open the same database; the
ledger of :mod:`.shared` keeps their leases, holders and chunk reference counts beside the records.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Iterator

import diskcache
from diskcache.core import MODE_PICKLE

from kvgate.plugins.cache_ssd.records import PREFIX, BadRecord, SnapshotRecord, record_from_json

GENERATION_KEY = "generation"
log = logging.getLogger("kvgate.cache")


class PickledKey(bytes):
    """A manifest key that was stored as a pickle (not by kvgate): shown as raw bytes, ignored."""


class JsonOnlyDisk(diskcache.Disk):
    """A diskcache Disk that stores bytes and str as they are and refuses to unpickle anything."""

    def get(self, key, raw):
        if not raw:
            return PickledKey(bytes(key))  # never unpickled; records() skips it
        return super().get(key, raw)

    def fetch(self, mode, filename, value, read):
        if mode == MODE_PICKLE:
            raise BadRecord("manifest value stored as a pickle")
        return super().fetch(mode, filename, value, read)


class Manifest:
    def __init__(self, directory: Path):
        self.cache = diskcache.Cache(
            str(directory), disk=JsonOnlyDisk, eviction_policy="none", sqlite_synchronous=2,
            disk_min_file_size=2**30, size_limit=2**62, timeout=60)

    @property
    def generation(self) -> int:
        value = self.cache.get(GENERATION_KEY, 0)
        return value if isinstance(value, int) else 0

    def transact(self):
        """One SQLite write transaction (``BEGIN IMMEDIATE``): serialises every worker's writes."""
        return self.cache.transact()

    def get(self, snapshot_id: str) -> SnapshotRecord | None:
        """The stored record of ``snapshot_id``, or None when absent or unreadable."""
        try:
            return record_from_json(self.cache.get(PREFIX + snapshot_id))
        except (BadRecord, ValueError, TypeError):
            return None

    def put(self, record: SnapshotRecord) -> None:
        self.cache.set(PREFIX + record.id, record.to_json())

    def delete(self, snapshot_id: str) -> None:
        self.cache.delete(PREFIX + snapshot_id)

    def records(self) -> Iterator[tuple[str, SnapshotRecord | BadRecord]]:
        """Every stored record (or the reason it is unreadable), by manifest key."""
        generation = self.generation
        for key in list(self.cache.iterkeys()):
            if not isinstance(key, str) or not key.startswith(PREFIX):
                continue
            try:
                record = record_from_json(self.cache.get(key))
                if record.generation > generation or PREFIX + record.id != key:
                    raise BadRecord("record is newer than the committed generation or misfiled")
                yield key, record
            except (BadRecord, ValueError, TypeError) as exc:
                yield key, exc if isinstance(exc, BadRecord) else BadRecord(str(exc))

    def delete_key(self, key: str) -> None:
        self.cache.delete(key)

    def clear(self) -> None:
        self.cache.clear()

    def close(self) -> None:
        self.cache.close()


def open_manifest(directory: Path, writer: bool) -> Manifest:
    """Open the manifest; a writer moves an unreadable database aside and starts empty."""
    try:
        manifest = Manifest(directory)
        manifest.generation  # noqa: B018 -- reading it proves the database is sound
        return manifest
    except (sqlite3.DatabaseError, BadRecord) as exc:
        if not writer or "locked" in str(exc):  # busy (another worker writes) is no damage
            raise
        aside = directory.with_name(f"manifest.corrupt-{int(time.time())}")
        log.warning("SSD cache manifest %s is unreadable (%s); moved to %s, starting empty", directory, exc, aside)
        os.replace(directory, aside)
        return Manifest(directory)

"""The ledger that lets several workers share one SSD store: leases, holders, chunk reference
counts and a change log, kept in the manifest database next to the snapshot records.

Keys (besides ``generation`` and the ``snap:<id>`` records of :mod:`.records`)::

    leases           {worker: expires}      every worker's lease; a worker renews its own
    hold:<id>        {worker: last_used}    the workers that keep snapshot <id> (its holders)
    ref:<chunk hex>  [count, size]          how many records name a chunk file, and its size
    log:<gen>        "<id>"                 the snapshot committed or dropped at generation <gen>
    total_bytes      int                    bytes of every referenced chunk file
    layout           1                      the ledger exists (a store written before it has none)

Every method runs inside the caller's ``manifest.transact()`` when it must be atomic with other
changes; SQLite's write lock (``BEGIN IMMEDIATE``) serialises the workers' transactions. Values are
JSON bytes or ints, read as untrusted input: a malformed value reads as empty.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from typing import Any, Optional

LEASES, TOTAL, LAYOUT, GENERATION = "leases", "total_bytes", "layout", "generation"
LOG_KEEP = 10_000  # change-log entries kept; a worker further behind re-reads every record


def default_worker_id() -> str:
    """Unique per process: host, pid and a random tag (a pid is reused after a restart)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


class Ledger:
    def __init__(self, cache: Any):
        self.cache = cache

    def _json(self, key: str, kind: type, default: Any) -> Any:
        raw = self.cache.get(key)
        try:
            value = json.loads(raw) if isinstance(raw, (bytes, str)) else None
        except (ValueError, UnicodeDecodeError):
            value = None
        return value if isinstance(value, kind) else default

    def _int(self, key: str) -> int:
        value = self.cache.get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    # --- leases -----------------------------------------------------------------------------------
    def leases(self) -> dict[str, float]:
        return {w: float(t) for w, t in self._json(LEASES, dict, {}).items() if isinstance(t, (int, float))}

    def live_workers(self, now: Optional[float] = None) -> set[str]:
        now = time.time() if now is None else now
        return {worker for worker, expires in self.leases().items() if expires > now}

    def renew(self, worker: str, seconds: float) -> None:
        """Extend ``worker``'s lease and forget leases that expired long ago."""
        with self.cache.transact():
            now = time.time()
            leases = {w: t for w, t in self.leases().items() if t > now - 3600}
            leases[worker] = now + seconds
            self.cache.set(LEASES, json.dumps(leases).encode())

    def end(self, worker: str) -> None:
        with self.cache.transact():
            leases = self.leases()
            if leases.pop(worker, None) is not None:
                self.cache.set(LEASES, json.dumps(leases).encode())

    # --- holders ----------------------------------------------------------------------------------
    def holders(self, snapshot_id: str) -> dict[str, float]:
        return {w: float(t) for w, t in self._json("hold:" + snapshot_id, dict, {}).items()
                if isinstance(t, (int, float))}

    def set_holders(self, snapshot_id: str, holders: dict[str, float]) -> None:
        self.cache.set("hold:" + snapshot_id, json.dumps(holders).encode())

    def forget_holders(self, snapshot_id: str) -> None:
        self.cache.delete("hold:" + snapshot_id)

    # --- chunk references -------------------------------------------------------------------------
    def ref(self, key: bytes) -> tuple[int, int]:
        value = self._json("ref:" + key.hex(), list, [0, 0])
        ok = len(value) == 2 and all(isinstance(v, int) and v >= 0 for v in value)
        return (value[0], value[1]) if ok else (0, 0)

    def incref(self, key: bytes, size: int) -> None:
        count, known = self.ref(key)
        if count == 0:
            self.cache.set(TOTAL, self._int(TOTAL) + size)
        self.cache.set("ref:" + key.hex(), json.dumps([count + 1, size if count == 0 else known]).encode())

    def decref(self, key: bytes) -> bool:
        """One record less names ``key``; True when none does any more (the file may go). A chunk
        with no count at all (a store written before the ledger) is never reported free."""
        count, size = self.ref(key)
        if count <= 1:
            if count == 1:
                self.cache.delete("ref:" + key.hex())
                self.cache.set(TOTAL, max(0, self._int(TOTAL) - size))
            return count == 1
        self.cache.set("ref:" + key.hex(), json.dumps([count - 1, size]).encode())
        return False

    def referenced(self, key: bytes) -> bool:
        return self.ref(key)[0] > 0

    def forget_ref(self, key: bytes) -> None:
        count, size = self.ref(key)
        if count:
            self.cache.delete("ref:" + key.hex())
            self.cache.set(TOTAL, max(0, self._int(TOTAL) - size))

    def total_bytes(self) -> int:
        return self._int(TOTAL)

    def rebuild(self, sizes: dict[bytes, int], counts: dict[bytes, int]) -> None:
        """Replace every reference count (a worker alone on the store heals counts a crash or an
        older build left wrong)."""
        with self.cache.transact():
            for key in [k for k in self.cache.iterkeys() if isinstance(k, str) and k.startswith("ref:")]:
                self.cache.delete(key)
            for key, count in counts.items():
                self.cache.set("ref:" + key.hex(), json.dumps([count, sizes[key]]).encode())
            self.cache.set(TOTAL, sum(sizes[k] for k in counts))
            self.cache.set(LAYOUT, 1)

    # --- generations and the change log -----------------------------------------------------------
    def generation(self) -> int:
        return self._int(GENERATION)

    def advance(self, snapshot_id: str) -> int:
        """Move to the next generation, logging ``snapshot_id`` as changed; returns it."""
        generation = self.generation() + 1
        self.cache.set(GENERATION, generation)
        self.cache.set(f"log:{generation}", snapshot_id)
        self.cache.delete(f"log:{generation - LOG_KEEP}")
        return generation

    def changes(self, after: int, upto: int) -> Optional[set[str]]:
        """Snapshot ids changed in generations ``after+1 .. upto``; None when the log no longer
        reaches back that far (read every record instead)."""
        changed = set()
        for generation in range(after + 1, upto + 1):
            value = self.cache.get(f"log:{generation}")
            if not isinstance(value, str):
                return None
            changed.add(value)
        return changed

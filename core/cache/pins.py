"""Retained (pinned) prefixes of the resident tier: their deadlines and the budget they may hold.

A pin keeps one resident entry (a marked prefix) out of eviction until its deadline; each use of
the prefix pushes the deadline out again by the pin's TTL. Pins are admitted within a byte budget
(``[cache] pinned_share`` of the device budget) and, when tenants are configured, each tenant
within its own part of it. A pin is sized by its own blocks, so a block two pins share counts for
both: the budget is a bound, never exceeded; a pin that holds a shorter one of its tenant whole
replaces it (:meth:`PinTable.covered`), so an agent marking each new turn holds one pin. Admission is in two steps: :meth:`PinTable.reserve`
when the request is planned (so its usage can tell what it writes before the first token) and
:meth:`PinTable.add` once the prefix is computed; :meth:`PinTable.release` returns an unused
reservation. Every method takes the table's lock: diagnostics read it from any thread.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Optional, Sequence

import attrs


@attrs.define(eq=False)
class Pin:
    entry: Any  # the resident entry holding exactly the prefix
    namespace: str
    tokens: list[int]
    tenant: str
    ttl: str  # the label usage reports ("5m", "1h", "24h")
    ttl_seconds: float
    nbytes: int
    expires: float


class PinTable:
    def __init__(self, budget_bytes: int, tenant_budget_bytes: Optional[int],
                 clock: Callable[[], float] = time.monotonic):
        self.budget_bytes, self.tenant_budget_bytes, self.clock = budget_bytes, tenant_budget_bytes, clock
        self.pins: dict[int, Pin] = {}  # by id(entry); the pin keeps its entry alive
        self.reserved: collections.Counter[str] = collections.Counter()  # bytes by tenant
        self.refused: collections.Counter[str] = collections.Counter()  # by reason
        self.lock = threading.Lock()

    def held(self, tenant: Optional[str] = None) -> int:
        """Bytes pinned and reserved, by everyone or by ``tenant``."""
        pinned = sum(p.nbytes for p in self.pins.values() if tenant is None or p.tenant == tenant)
        return pinned + (sum(self.reserved.values()) if tenant is None else self.reserved[tenant])

    def reserve(self, tenant: str, nbytes: int) -> Optional[str]:
        """Reserve ``nbytes`` for a pin of ``tenant``; returns why not (``"share"``,
        ``"tenant_share"``) when that would pass a budget, else None."""
        with self.lock:
            if self.tenant_budget_bytes is not None and self.held(tenant) + nbytes > self.tenant_budget_bytes:
                reason = "tenant_share"
            elif self.held() + nbytes > self.budget_bytes:
                reason = "share"
            else:
                self.reserved[tenant] += nbytes
                return None
            self.refused[reason] += 1
            return reason

    def release(self, tenant: str, nbytes: int) -> None:
        with self.lock:
            self.reserved[tenant] -= nbytes
            self.reserved = +self.reserved

    def find(self, namespace: str, tokens: Sequence[int]) -> Optional[Pin]:
        """The pin of exactly ``tokens`` in ``namespace``, if any."""
        with self.lock:
            wanted = list(tokens)
            return next((p for p in self.pins.values() if p.namespace == namespace and p.tokens == wanted), None)

    def covered(self, namespace: str, tokens: Sequence[int], tenant: str, ttl_seconds: float) -> list[Pin]:
        """``tenant``'s pins that a pin of ``tokens`` for ``ttl_seconds`` from now would hold whole:
        shorter prefixes of it, due no later (an agent marks its latest turn each time)."""
        with self.lock:
            until, n = self.clock() + ttl_seconds, len(tokens)
            return [p for p in self.pins.values() if p.namespace == namespace and p.tenant == tenant
                    and len(p.tokens) < n and p.expires <= until and list(tokens[:len(p.tokens)]) == p.tokens]

    def add(self, entry: Any, namespace: str, tenant: str, ttl: str, ttl_seconds: float, nbytes: int,
            reserved: Optional[int] = None) -> Pin:
        """Pin ``entry`` (``nbytes``): its reservation (``reserved``, default ``nbytes``) is used up."""
        with self.lock:
            self.reserved[tenant] -= nbytes if reserved is None else reserved
            self.reserved = +self.reserved
            pin = Pin(entry, namespace, list(entry.tokens), tenant, ttl, ttl_seconds, nbytes,
                      self.clock() + ttl_seconds)
            self.pins[id(entry)] = pin
            return pin

    def extend(self, pin: Pin, ttl: str, ttl_seconds: float) -> None:
        """A new mark on a pinned prefix: its deadline is the later one, its TTL the longer."""
        with self.lock:
            pin.expires = max(pin.expires, self.clock() + ttl_seconds)
            if ttl_seconds > pin.ttl_seconds:
                pin.ttl, pin.ttl_seconds = ttl, ttl_seconds

    def used(self, namespace: str, tokens: Sequence[int]) -> list[Pin]:
        """A request read ``tokens`` from the cache: every pin they start with is refreshed by its
        own TTL; returns those pins."""
        with self.lock:
            now, used = self.clock(), []
            for pin in self.pins.values():
                n = len(pin.tokens)
                if pin.namespace == namespace and n <= len(tokens) and list(tokens[:n]) == pin.tokens:
                    pin.expires = max(pin.expires, now + pin.ttl_seconds)
                    used.append(pin)
            return used

    def expired(self) -> list[Pin]:
        """Remove and return the pins whose deadline has passed."""
        with self.lock:
            now = self.clock()
            gone = [pin for pin in self.pins.values() if pin.expires <= now]
            for pin in gone:
                del self.pins[id(pin.entry)]
            return gone

    def drop(self, entry: Any) -> None:
        with self.lock:
            self.pins.pop(id(entry), None)

    def summary(self) -> dict:
        """A JSON-able view for diagnostics (no token text)."""
        with self.lock:
            now = self.clock()
            tenants = sorted({p.tenant for p in self.pins.values()} | set(self.reserved))
            return {"budget_bytes": self.budget_bytes, "tenant_budget_bytes": self.tenant_budget_bytes,
                    "pins": len(self.pins), "bytes": sum(p.nbytes for p in self.pins.values()),
                    "by_tenant": {t: self.held(t) for t in tenants}, "refused": dict(self.refused),
                    "entries": [{"tenant": p.tenant, "tokens": len(p.tokens), "ttl": p.ttl, "bytes": p.nbytes,
                                 "expires_in_s": round(p.expires - now, 1)} for p in self.pins.values()]}

"""Retention hints in the cache manager (engine thread): a request's marked prefixes are reserved
when it is planned, pinned in the resident tier once its prompt is computed, refreshed by each
use and let go at their deadline; backup tiers keep them at least as long.

A marked prefix is pinned as its own resident entry (a fork of the request's session at the
mark, sharing its blocks), so the pin holds exactly the prefix: the rest of the conversation
stays ordinary LRU state. A mark over the pinned budget is ignored, counted in
``kvgate_cache_pins_refused_total`` and the diagnostics' ``pins.refused``; never an error.
"""

from __future__ import annotations

import logging
from typing import Optional

from kvgate.core.cache.plan import CachePlan
from kvgate.core.cache.retention import Reserved, Retention
from kvgate.core.runtime import Session

log = logging.getLogger("kvgate.cache")


class Pinning:
    """Mixin of :class:`kvgate.core.cache.manager.CacheManager`."""

    def _reserve_pins(self, plan: CachePlan) -> None:
        """At attach: reserve the budget of each mark not pinned yet (``plan.retained``)."""
        retention: Optional[Retention] = plan.retention
        if retention is None or self.resident is None:
            return
        self._expire_pins()
        block_bytes = self.runtime.pool_stats()["block_bytes"]
        marks = {m.position: m for m in sorted(retention.marks, key=lambda m: m.ttl_seconds)}  # longest TTL wins
        for position, mark in sorted(marks.items()):
            if position < self.min_tokens or position > len(plan.tokens):
                continue
            if self.pins.find(plan.namespace, plan.tokens[:position]) is not None:
                plan.retained.append(Reserved(mark, 0))
                continue
            nbytes = -(-position // self.runtime.block_size) * block_bytes
            replaced = self.pins.covered(plan.namespace, plan.tokens[:position], retention.tenant, mark.ttl_seconds)
            net = max(0, nbytes - sum(pin.nbytes for pin in replaced))
            refused = self.pins.reserve(retention.tenant, net)
            if refused is None:
                plan.retained.append(Reserved(mark, nbytes, net))
            else:
                self.metrics.pins_refused.labels(reason=refused).inc()
                log.info("cache: retention hint of %d tokens (%s) for tenant %s ignored: over the pinned %s",
                         position, mark.ttl, retention.tenant, refused.replace("_", " "))

    def pin(self, plan: CachePlan, session: Session) -> None:
        """The prompt is computed (``session`` holds it): pin the reserved marks."""
        if not plan.retained:
            return
        for reserved in plan.retained:
            if not reserved.settled:
                reserved.settled = True
                try:
                    self._pin_one(plan, session, reserved)
                except Exception as exc:  # e.g. no block for the fork's last one: the hint is ignored
                    log.warning("cache: pinning a prefix of %d tokens failed: %s", reserved.mark.position, exc)
                    self.pins.release(plan.retention.tenant, reserved.net)
        while self.resident.over_budget() and self._evict_one():
            pass
        self._update_gauges()

    def _pin_one(self, plan: CachePlan, session: Session, reserved: Reserved) -> None:
        mark, namespace, tenant = reserved.mark, plan.namespace, plan.retention.tenant
        prefix = session.tokens[:mark.position]
        pin = self.pins.find(namespace, prefix)
        if pin is not None:
            self.pins.release(tenant, reserved.net)
            self.pins.extend(pin, mark.ttl, mark.ttl_seconds)
        else:
            replaced = self.pins.covered(namespace, prefix, tenant, mark.ttl_seconds)
            entry, is_new = self.resident.admit(namespace, self.runtime.fork(session, mark.position), None)
            if is_new:
                self.events.stored(self.resident_name, namespace, entry.tokens)
                entry.backed_up = self.backups.back_up(namespace, entry.session, None, entry.round, wait=False)
            pin = self.pins.add(entry, namespace, tenant, mark.ttl, mark.ttl_seconds, reserved.nbytes, reserved.net)
            entry.pinned = True
            for old in replaced:  # held whole by the new pin: an ordinary entry above it now
                self.pins.drop(old.entry)
                old.entry.pinned = False
        self._retain_in_backups(pin.namespace, pin.tokens, pin.expires - self.pins.clock())

    def settle(self, plan: Optional[CachePlan]) -> None:
        """The request ended (``plan`` None: before it was planned): reservations it did not pin
        are released."""
        for reserved in plan.retained if plan is not None else ():
            if not reserved.settled:
                reserved.settled = True
                self.pins.release(plan.retention.tenant, reserved.net)

    def _refresh_pins(self, plan: CachePlan) -> None:
        """A resident hit refreshes every pin the hit covers."""
        for pin in self.pins.used(plan.namespace, plan.tokens[:plan.cached_tokens]):
            self._retain_in_backups(pin.namespace, pin.tokens, pin.ttl_seconds)

    def _expire_pins(self) -> None:
        for pin in self.pins.expired():
            pin.entry.pinned = False

    def _retain_in_backups(self, namespace: str, tokens: list[int], seconds: float) -> None:
        for tier in self.backup_tiers.values():
            tier.retain(namespace, tokens, seconds)

"""Keeping finished state resident, giving it back, and reclaiming blocks (engine thread)."""

from __future__ import annotations

from typing import Optional

from kvgate.core.runtime import Session


class Residency:
    """Mixin of :class:`kvgate.core.cache.manager.CacheManager`: admission and eviction."""

    def finish(self, namespace: str, session: Session, cache_key: Optional[str]) -> None:
        """The request finished: its terminal state stays resident (the cache owns ``session``)."""
        self._expire_pins()
        if self.pool.owns(session):
            kept = self.runtime.fork(session)
            self.pool.give(session)
            session = kept
        if self.resident is None or session.length == 0:
            self.backups.back_up(namespace, session, cache_key, 1, wait=False)
            self.runtime.release(session)
            return
        entry, is_new = self.resident.admit(namespace, session, cache_key)
        if is_new:
            self.events.stored(self.resident_name, namespace, entry.tokens)
            entry.backed_up = self.backups.back_up(namespace, entry.session, entry.cache_key, entry.round, wait=False)
        for old in self.resident.superseded(entry):
            self._evict(old, back_up=False)
        while self.resident.over_budget() and self._evict_one():
            pass
        self._update_gauges()

    def discard(self, session: Session) -> None:
        """The request was cancelled or failed: give its state back."""
        self.pool.give(session)

    def reclaim(self, blocks_needed: int) -> int:
        """Evict (backing up first) until ``blocks_needed`` blocks are free; returns blocks freed."""
        before = self.runtime.pool_stats()["blocks_free"]
        while self.resident is not None and self.runtime.pool_stats()["blocks_free"] < blocks_needed:
            if not self._evict_one():
                break
        self._update_gauges()
        return self.runtime.pool_stats()["blocks_free"] - before

    def _evict_one(self) -> bool:
        victim = self.resident.next_victim()
        if victim is None:
            return False
        self._evict(victim, back_up=True)
        return True

    def _evict(self, entry, back_up: bool) -> None:
        if back_up and not entry.backed_up:
            entry.backed_up = self.backups.back_up(entry.namespace, entry.session, entry.cache_key, entry.round,
                                                   wait=True)
        self._remove(entry)
        self.metrics.evictions.labels(tier=self.resident_name).inc()

    def _remove(self, entry) -> None:
        tokens = list(entry.tokens)  # the session is released with the entry
        self.pins.drop(entry)
        self.resident.remove(entry)
        self.events.removed(self.resident_name, entry.namespace, tokens)

    def _update_gauges(self) -> None:
        if self.resident is not None:
            self.metrics.device_bytes.set(self.resident.resident_bytes())
            self.metrics.device_entries.set(len(self.resident.entries()))
            self.metrics.pinned_bytes.set(self.resident.pinned_bytes())
            self.metrics.snapshot_bytes.set(self.resident.aux_bytes())

    def close(self) -> None:
        """Back up what is resident and not yet backed up, then close every tier (flushing writers)."""
        if self.resident is not None:
            for entry in self.resident.entries():
                if not entry.backed_up:
                    entry.backed_up = self.backups.back_up(entry.namespace, entry.session, entry.cache_key,
                                                           entry.round, wait=True)
                self._remove(entry)
        for tier in [self.resident, *self.backup_tiers.values()]:
            if tier is not None:
                tier.close()

"""The cache manager: what the engine calls to plan, restore, keep and reclaim prefix state.

It owns the lookup order, eviction order, accounting, restore pool and backups over
one resident tier and an ordered list of backup tiers (:mod:`kvgate.core.cache.tiers`), which it
knows by role only, and tells lookup observers (:mod:`kvgate.core.cache.lookup_observers`) what
each lookup found. Threading: everything runs on the engine thread except
:meth:`CacheManager.load` (a worker thread: reads and validation, no runtime calls) and
:meth:`diagnostics` (any thread).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Optional, Sequence

from kvgate.core.cache.backup import Backups
from kvgate.core.cache.events import EventSinks, KvEventSink
from kvgate.core.cache.lookup import fill_plan
from kvgate.core.cache.lookup_observers import Candidate, Lookup, LookupObserver
from kvgate.core.cache.metrics import CacheMetrics
from kvgate.core.cache.pinning import Pinning
from kvgate.core.cache.pins import PinTable
from kvgate.core.cache.plan import CachePlan
from kvgate.core.cache.retention import Retention, pin_budgets
from kvgate.core.cache.residency import Residency
from kvgate.core.cache.restore import Restores
from kvgate.core.cache.restore_pool import RestorePool
from kvgate.core.cache.snapshot import BadChunk
from kvgate.core.cache.tiers import Tiers
from kvgate.core.config import Config
from kvgate.core.observe.progress import BOARD, LONG_WORK_TOKENS
from kvgate.core.runtime import ModelRuntime, Session

log = logging.getLogger("kvgate.cache")


class CacheManager(Restores, Residency, Pinning):
    """``tiers`` come from :func:`kvgate.core.cache.build.build_tier_set`. A tier is also reachable
    as an attribute under its registered name (``manager.<name>``; None when registered but not
    built), for tools and tests."""

    def __init__(self, config: Config, runtime: ModelRuntime, tiers: Tiers, metrics_registry: Any = None,
                 observers: Sequence[LookupObserver] = ()):
        settings = config.cache
        self.runtime, self.settings, self.tiers = runtime, settings, tiers
        self.resident = tiers.resident if settings.enabled else None
        self.resident_name = tiers.resident_name
        self.backup_tiers = dict(tiers.backups) if settings.enabled else {}
        self.metrics = CacheMetrics(metrics_registry, [*([self.resident_name] if self.resident else []),
                                                       *self.backup_tiers])
        for name, tier in self.backup_tiers.items():
            tier.bind(self.metrics, name)
        self.min_tokens = max(1, runtime.block_size)
        self.pool = RestorePool(runtime, capacity=config.engine.max_batch + 1)
        self.backups = Backups(runtime, list(self.backup_tiers.values()), settings.chunk_tokens, self.min_tokens)
        self.observers = list(observers)
        self.recent: collections.deque[dict] = collections.deque(maxlen=64)
        self.recent_lock = threading.Lock()
        self.events = EventSinks()
        self.pins = PinTable(*pin_budgets(config, settings.device_bytes))

    def add_event_sink(self, sink: KvEventSink) -> None:
        """Tell ``sink`` (engine thread) of every entry the resident tier admits or drops from now on."""
        self.events.add(sink)

    def __getattr__(self, name: str) -> Any:
        tiers = self.__dict__.get("tiers")
        if tiers is not None and name in tiers.registered:
            return tiers.by_name().get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- lookup -----------------------------------------------------------------------------------
    def plan(self, namespace: str, tokens: list[int], cache_key: Optional[str],
             retention: Optional[Retention] = None) -> CachePlan:
        plan = CachePlan(namespace=namespace, tokens=tokens, cache_key=cache_key, retention=retention)
        if len(tokens) < 2 or (self.resident is None and not self.backup_tiers):
            return plan
        resident = (self.resident_name, self.resident) if self.resident is not None else None
        consulted, seen = fill_plan(plan, resident, self.backup_tiers, self.min_tokens)
        for tier in consulted:
            self.metrics.lookups.labels(tier=tier).inc()
            self.metrics.queries.labels(tier=tier).inc(len(tokens))
        if self.observers:
            candidates = tuple(Candidate(tier, stored.tokens, shared, self._replayed(tier, stored, shared))
                               for tier, stored, shared in seen)
            lookup = Lookup(namespace, tokens, candidates)
            for observer in self.observers:
                observer.looked_up(lookup)
        return plan

    def _replayed(self, tier: str, stored: Any, shared: int) -> Optional[int]:
        """What a fork of a resident candidate at ``shared`` replays (None on a backup tier)."""
        return self.runtime.cut_replay_tokens(stored.session, shared) if tier == self.resident_name else None

    def load(self, plan: CachePlan) -> None:
        """Worker thread: read and validate the backed-up payload; a bad snapshot downgrades the plan."""
        if not plan.needs_load or not plan.from_backup:
            return
        started = time.perf_counter()
        tier = plan.backup
        tokens, read = plan.cached_tokens, False
        operation = BOARD.start("ssd_restore", f"{plan.source} snapshot {plan.snapshot.id}", tokens) \
            if tokens >= LONG_WORK_TOKENS else None  # a long read shows on /health while it runs
        try:
            plan.payload = tier.read(plan.snapshot, plan.cached_tokens)
            plan.needs_load, read = False, True
        except BadChunk as exc:
            tier.drop_bad(plan.snapshot, str(exc), exc.key)
            plan.go_resident()
        except Exception as exc:  # e.g. out of memory: compute instead, keep the snapshot
            log.warning("%s cache: reading %s failed (%s); computing instead", plan.source, plan.snapshot.id, exc)
            plan.go_resident()
        finally:
            if operation is not None:
                BOARD.advance(operation, tokens if read else 0)
                BOARD.finish(operation, "done" if read else "failed")
        plan.restore_seconds += time.perf_counter() - started

    # --- sessions ---------------------------------------------------------------------------------
    def attach(self, plan: CachePlan) -> Session:
        session = self._attach(plan)
        self._reserve_pins(plan)  # the source is final here: what the marks write is known
        return session

    def _attach(self, plan: CachePlan) -> Session:
        if plan.from_backup:
            if plan.needs_load:
                self.load(plan)
            if plan.from_backup:
                session = self._restore(plan)
                if session is not None:
                    return self._attached(plan, session)
        if plan.source != "cold" and self.resident is not None:
            entry = plan.resident_entry
            if entry is not None and entry.resident:
                self.resident.touch(entry)
                self._refresh_pins(plan)
                plan.replayed_tokens = self.runtime.cut_replay_tokens(entry.session, plan.cached_tokens)
                return self._attached(plan, self.runtime.fork(entry.session, plan.cached_tokens))
        plan.go_cold()
        return self._attached(plan, self.runtime.new_session())

    def _attached(self, plan: CachePlan, session: Session) -> Session:
        if plan.cached_tokens:
            self.metrics.hits.labels(tier=plan.source).inc(plan.cached_tokens)
            self.metrics.lookup_hits.labels(tier=plan.source).inc()
            self.metrics.prompt_tokens.labels(source=plan.source).inc(plan.cached_tokens)
            self.metrics.replayed_tokens.labels(tier=plan.source).inc(plan.replayed_tokens)
        self.metrics.prompt_tokens.labels(source="computed").inc(len(plan.tokens) - plan.cached_tokens)
        with self.recent_lock:
            self.recent.append({"time": time.time(), "namespace": plan.namespace, "prompt_tokens": len(plan.tokens),
                                "source": plan.source, "cached_tokens": plan.cached_tokens, "hit_type": plan.hit_type,
                                "replayed_tokens": plan.replayed_tokens})
        return session

    # --- operations -------------------------------------------------------------------------------
    def diagnostics(self) -> dict:
        return {
            "enabled": self.settings.enabled,
            **{key: value for observer in self.observers for key, value in observer.diagnostics().items()},
            "recent_lookups": self._recent(),
            **{name: (tier.stats() if tier is not None else None) for name, tier in self._named_tiers().items()},
            "restore_pool": self.pool.stats(),
            "pins": self.pins.summary(),
        }

    def _named_tiers(self) -> dict[str, Any]:
        """Every registered tier by name (None when not built), resident first."""
        built = {**({self.resident_name: self.resident} if self.resident is not None else {}), **self.backup_tiers}
        return {**built, **{name: None for name in self.tiers.registered if name not in built}}

    def _recent(self) -> list[dict]:
        with self.recent_lock:
            return list(self.recent)

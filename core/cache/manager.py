"""The cache manager: what the engine calls to plan, restore, keep and reclaim prefix state.

Threading: everything runs on the engine thread except :meth:`CacheManager.load` (a worker
thread: disk reads and validation, no runtime calls) and :meth:`diagnostics` (any thread).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Mapping, Optional

from kvgate.core.cache.almost_hits import AlmostHits
from kvgate.core.cache.backup import Backups
from kvgate.core.cache.chunk_format import BadChunk
from kvgate.core.cache.lookup import fill_plan
from kvgate.core.cache.metrics import CacheMetrics
from kvgate.core.cache.plan import CachePlan
from kvgate.core.cache.residency import Residency
from kvgate.core.cache.restore import Restores
from kvgate.core.cache.restore_pool import RestorePool
from kvgate.core.config import Config
from kvgate.core.runtime import ModelRuntime, Session

log = logging.getLogger("kvgate.cache")


class CacheManager(Restores, Residency):
    def __init__(self, config: Config, runtime: ModelRuntime, tiers: Mapping[str, Any] | list,
                 metrics_registry: Any = None):
        settings = config.cache
        tiers = tiers if isinstance(tiers, Mapping) else {tier.name: tier for tier in tiers}
        self.runtime, self.settings = runtime, settings
        self.device = tiers.get("device") if settings.enabled else None
        self.ssd = tiers.get("ssd") if settings.enabled and settings.ssd_enabled else None
        self.unused_tiers = [t for t in tiers.values() if t is not self.device and t is not self.ssd]
        self.metrics = CacheMetrics(metrics_registry)
        if self.ssd is not None:
            self.ssd.bind(self.metrics)
        self.min_tokens = max(1, runtime.block_size)
        self.pool = RestorePool(runtime, capacity=config.engine.max_batch + 1)
        self.backups = Backups(runtime, self.ssd, settings.chunk_tokens, self.min_tokens)
        self.almost = AlmostHits(runtime.tokenizer, settings.almost_hit_min_tokens, settings.almost_hit_min_ratio,
                                 self.metrics.almost_hits)
        self.recent: collections.deque[dict] = collections.deque(maxlen=64)
        self.recent_lock = threading.Lock()

    # --- lookup -----------------------------------------------------------------------------------
    def plan(self, namespace: str, tokens: list[int], cache_key: Optional[str]) -> CachePlan:
        plan = CachePlan(namespace=namespace, tokens=tokens, cache_key=cache_key)
        if len(tokens) < 2 or (self.device is None and self.ssd is None):
            return plan
        consulted, seen = fill_plan(plan, self.device, self.ssd, self.min_tokens)
        for tier in consulted:
            self.metrics.lookups.labels(tier=tier).inc()
            self.metrics.queries.labels(tier=tier).inc(len(tokens))
        self._check_almost_hit(plan, seen)
        return plan

    def _check_almost_hit(self, plan: CachePlan, seen: list) -> None:
        found = [(fork, tier, stored) for tier, stored, fork in seen
                 if self.almost.qualifies(plan.tokens, stored.tokens, fork)]
        if found:
            fork, tier, stored = max(found, key=lambda item: item[0])
            self.almost.record(plan.namespace, tier, plan.tokens, stored.tokens, fork)

    def load(self, plan: CachePlan) -> None:
        """Worker thread: read and validate the SSD payload; a bad snapshot downgrades the plan."""
        if not plan.needs_load or plan.source != "ssd":
            return
        started = time.perf_counter()
        try:
            plan.payload = self.ssd.read(plan.snapshot, plan.cached_tokens)
            plan.needs_load = False
        except BadChunk as exc:
            self.ssd.drop_bad(plan.snapshot, str(exc), exc.key)
            plan.go_device()
        except Exception as exc:  # e.g. out of memory: compute instead, keep the snapshot
            log.warning("SSD cache: reading %s failed (%s); computing instead", plan.snapshot.id, exc)
            plan.go_device()
        plan.restore_seconds += time.perf_counter() - started

    # --- sessions ---------------------------------------------------------------------------------
    def attach(self, plan: CachePlan) -> Session:
        if plan.source == "ssd":
            if plan.needs_load:
                self.load(plan)
            if plan.source == "ssd":
                session = self._restore(plan)
                if session is not None:
                    return self._attached(plan, session)
        if plan.source == "device":
            entry = plan.device_entry
            if entry is not None and entry.resident:
                self.device.touch(entry)
                return self._attached(plan, self.runtime.fork(entry.session, plan.cached_tokens))
        plan.go_cold()
        return self._attached(plan, self.runtime.new_session())

    def _attached(self, plan: CachePlan, session: Session) -> Session:
        if plan.cached_tokens:
            self.metrics.hits.labels(tier=plan.source).inc(plan.cached_tokens)
            self.metrics.lookup_hits.labels(tier=plan.source).inc()
            self.metrics.prompt_tokens.labels(source=plan.source).inc(plan.cached_tokens)
        self.metrics.prompt_tokens.labels(source="computed").inc(len(plan.tokens) - plan.cached_tokens)
        with self.recent_lock:
            self.recent.append({"time": time.time(), "namespace": plan.namespace, "prompt_tokens": len(plan.tokens),
                                "source": plan.source, "cached_tokens": plan.cached_tokens, "hit_type": plan.hit_type})
        return session

    # --- operations -------------------------------------------------------------------------------
    def diagnostics(self) -> dict:
        return {
            "enabled": self.settings.enabled,
            "almost_hits": self.almost.recent(),
            "recent_lookups": self._recent(),
            "device": self.device.stats() if self.device is not None else None,
            "ssd": self.ssd.stats() if self.ssd is not None else None,
            "restore_pool": self.pool.stats(),
        }

    def _recent(self) -> list[dict]:
        with self.recent_lock:
            return list(self.recent)

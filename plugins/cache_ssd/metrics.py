"""Prometheus metrics of the SSD tier, registered on the cache manager's registry when bound."""

from __future__ import annotations

from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Gauge

from kvgate.core.cache.metrics import CacheMetrics


class SsdMetrics:
    def __init__(self, cache: Optional[CacheMetrics] = None, name: str = "ssd"):
        cache = cache if cache is not None else CacheMetrics(CollectorRegistry(), [name])
        r = cache.registry
        self.ssd_bytes = Gauge("kvgate_cache_ssd_bytes", "Bytes of chunk files in the SSD cache.", registry=r)
        self.ssd_snapshots = Gauge("kvgate_cache_ssd_snapshots", "Snapshots named by the SSD manifest.", registry=r)
        self.backups = Counter("kvgate_cache_ssd_backups", "Snapshots committed to SSD.", registry=r)
        self.backup_bytes = Counter("kvgate_cache_ssd_written_bytes", "Chunk bytes written to SSD.", registry=r)
        self.backup_failures = Counter("kvgate_cache_ssd_backup_failures", "Snapshot commits that failed.", registry=r)
        self.bad_snapshots = Counter("kvgate_cache_ssd_bad_snapshots", "SSD snapshots dropped as damaged.", registry=r)
        self.evictions = cache.evictions.labels(tier=name)

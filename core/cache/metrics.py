"""Prometheus metrics of the prefix cache, registered on the registry the host passes in.

Names follow vLLM's where one exists, with the ``kvgate:`` prefix in place of ``vllm:``:
``kvgate:prefix_cache_queries`` / ``kvgate:prefix_cache_hits`` count *tokens* (as in vLLM), here
with a ``tier`` label (the tier's registered name); ``kvgate:prompt_tokens_by_source`` splits
prompt tokens into ``computed`` and one source per tier. Counters are exposed with the ``_total``
suffix. A backup tier registers its own metrics on :attr:`CacheMetrics.registry` when bound.
"""

from __future__ import annotations

from typing import Iterable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class CacheMetrics:
    def __init__(self, registry: Optional[CollectorRegistry] = None, tiers: Iterable[str] = ()):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.queries = Counter("kvgate:prefix_cache_queries", "Prompt tokens looked up in the prefix cache, per tier.",
                               ["tier"], registry=r)
        self.hits = Counter("kvgate:prefix_cache_hits", "Prompt tokens served by the prefix cache, per tier.",
                            ["tier"], registry=r)
        self.lookups = Counter("kvgate_cache_lookups", "Requests looked up in each cache tier.", ["tier"], registry=r)
        self.lookup_hits = Counter("kvgate_cache_lookup_hits", "Requests served from each cache tier.", ["tier"],
                                   registry=r)
        self.prompt_tokens = Counter("kvgate:prompt_tokens_by_source", "Prompt tokens by where their state came from.",
                                     ["source"], registry=r)
        self.restore_seconds = Histogram(
            "kvgate_cache_restore_seconds", "Time to read, validate and upload a backed-up snapshot.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        # the resident tier's size (named "device" as before, for existing dashboards)
        self.device_bytes = Gauge("kvgate_cache_device_bytes", "Bytes of blocks held by resident cache entries.",
                                  registry=r)
        self.device_entries = Gauge("kvgate_cache_device_entries", "Resident cache entries.", registry=r)
        self.pinned_bytes = Gauge("kvgate_cache_pinned_bytes",
                                  "Bytes of blocks held by pinned (retained) resident prefixes.", registry=r)
        self.pins_refused = Counter("kvgate_cache_pins_refused",
                                    "Retention hints ignored: over the pinned share or the tenant's part of it.",
                                    ["reason"], registry=r)
        for reason in ("share", "tenant_share"):
            self.pins_refused.labels(reason=reason)
        self.replayed_tokens = Counter(
            "kvgate_cache_replayed_tokens", "Tokens run again to cut a hit's state at its length (recurrent "
            "state restored from the nearest snapshot before it), per tier.", ["tier"], registry=r)
        self.snapshot_bytes = Gauge("kvgate_cache_snapshot_bytes", "Bytes of auxiliary state (recurrent-state "
                                    "snapshots...) held by resident cache entries beside their blocks.", registry=r)
        self.evictions = Counter("kvgate_cache_evictions", "Entries evicted, per tier.", ["tier"], registry=r)
        tiers = list(tiers)
        for tier in tiers:
            for metric in (self.queries, self.hits, self.lookups, self.lookup_hits, self.evictions,
                           self.replayed_tokens):
                metric.labels(tier=tier)
        for source in ("computed", *tiers):
            self.prompt_tokens.labels(source=source)

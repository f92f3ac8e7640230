"""Plugin: serving gauges read at scrape time, for the Grafana dashboard (``docs/grafana/kvgate.json``).

Added to the server's ``/metrics`` (no routes of its own: it uses ``register_adapters`` because that
hook hands it the server context when the app is built):

- ``kvgate_requests_running`` / ``kvgate_requests_waiting``: requests decoding, and queued, loading
  or prefilling (the engine's own counts, as ``/loads`` reports them);
- ``kvgate_kv_pool_blocks_used`` / ``kvgate_kv_pool_blocks_total``: the runtime's KV block pool;
- ``kvgate_cache_tier_bytes`` / ``kvgate_cache_tier_capacity_bytes`` / ``kvgate_cache_tier_entries``,
  labelled by ``tier``: each built cache tier's occupancy from its ``stats()``.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import GaugeMetricFamily

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.cache_page.overview import tier_rows


class ServingGauges:
    """A prometheus collector over the live engine and cache of one server."""

    def __init__(self, ctx):
        self.ctx = ctx

    def describe(self) -> list:
        return []  # collected at scrape time only: nothing to check when registered

    def collect(self) -> Iterator[GaugeMetricFamily]:
        engine = self.ctx.pipeline.engine
        loads, pool = engine.loads(), engine.runtime.pool_stats()
        yield GaugeMetricFamily("kvgate_requests_running", "Requests decoding now.", value=loads["running"])
        yield GaugeMetricFamily("kvgate_requests_waiting", "Requests queued, loading or prefilling.",
                                value=loads["waiting"])
        yield GaugeMetricFamily("kvgate_kv_pool_blocks_used", "KV pool blocks in use.",
                                value=pool["blocks_total"] - pool["blocks_free"])
        yield GaugeMetricFamily("kvgate_kv_pool_blocks_total", "KV pool blocks.", value=pool["blocks_total"])
        yield from self.tier_gauges()

    def tier_gauges(self) -> Iterator[GaugeMetricFamily]:
        families = {"bytes": GaugeMetricFamily("kvgate_cache_tier_bytes", "Bytes held by each cache tier.",
                                               labels=["tier"]),
                    "capacity_bytes": GaugeMetricFamily("kvgate_cache_tier_capacity_bytes",
                                                        "Byte budget of each cache tier.", labels=["tier"]),
                    "entries": GaugeMetricFamily("kvgate_cache_tier_entries", "Entries held by each cache tier.",
                                                 labels=["tier"])}
        for row in tier_rows(self.ctx, counters=False):
            for field, family in families.items():
                if row[field] is not None:
                    family.add_metric([row["name"]], row[field])
        yield from families.values()


def build_routes(ctx) -> list:
    ctx.metrics.registry.register(ServingGauges(ctx))
    return []


@hookimpl
def register_adapters(register):
    register("serving_gauges", build_routes)

"""What the cache page shows, as one JSON object (``GET /v1/cache/overview``).

- ``model``: the served model, the runtime that loaded it, its source format, weights setting,
  dtype, device, dialect and context;
- ``tiers``: each cache tier's bytes, capacity and entries (the tier's own ``stats()``), and for
  operators the requests looked up in it and served from it;
- ``requests``: the most recent finished requests (:mod:`.recent_requests`), newest first;
- ``almost_hits``: lookups that forked late inside a stored sequence, with the text on either side;
- ``progress``: long operations in flight (a long prompt's cold prefill, an SSD restore) with their
  done and total (:mod:`kvgate.core.observe.progress`, as ``/health`` lists them).

Scoping follows the rest of the server: a tenant sees only its own requests, with cached tokens
rounded as its responses' usage is, unless its key may read ``/metrics`` (an operator: every key of a
one-tenant server, else the admin keys), which sees exact counts and the tier counters; admin keys
see every tenant's requests. Almost-hits are scoped as ``/v1/cache/diagnostics`` scopes them.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from kvgate.core.loading.model_runtimes import choose_runtime, collect_runtimes
from kvgate.core.loading.model_sources import default_model_path, read_model_source
from kvgate.core.observe.progress import BOARD
from kvgate.plugins.cache_page.recent_requests import RequestSummary, recent_requests_of
from kvgate.core.tenants import Tenant
from kvgate.core.types import Usage
from kvgate.plugins.cache_routes import cache_manager, scoped

log = logging.getLogger("kvgate")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
# the keys tiers use in stats() for their capacity and their entry count (device, SSD)
CAPACITY_KEYS = ("capacity_bytes", "budget_bytes")
ENTRY_KEYS = ("entries", "snapshots")
NO_COUNTERS = {"lookups": None, "hits": None, "misses": None}


def model_facts(ctx) -> dict[str, Any]:
    """The served model as loaded; the runtime's name is found again from the model's header."""
    info, config = ctx.pipeline.runtime.info, ctx.config.model
    return {"name": ctx.model_name, "architecture": info.architecture, "runtime": loaded_runtime(ctx),
            "source_format": source_format(ctx), "weights": config.weights, "dtype": info.dtype,
            "device": info.device, "dialect": ctx.pipeline.dialect_name, "context": info.max_context,
            "block_size": ctx.pipeline.runtime.block_size}


def _model_source(ctx):
    return read_model_source(ctx.pm, ctx.config.model.path or default_model_path(ctx.pm))


def loaded_runtime(ctx) -> str:
    try:
        return choose_runtime(collect_runtimes(ctx.pm), _model_source(ctx))
    except Exception as exc:  # the page must show the rest even if the header cannot be read again
        log.warning("cache page: runtime of the served model unknown: %s", exc)
        return "unknown"


def source_format(ctx) -> str:
    try:
        return _model_source(ctx).kind
    except Exception as exc:
        log.warning("cache page: source format of the served model unknown: %s", exc)
        return "unknown"


def first_of(stats: dict, keys: tuple[str, ...]) -> Optional[int]:
    return next((stats[key] for key in keys if isinstance(stats.get(key), int)), None)


def tier_rows(ctx, counters: bool) -> list[dict[str, Any]]:
    """One row per registered tier (resident first); ``counters``: include lookups and hits."""
    cache = cache_manager(ctx)
    diagnostics = cache.diagnostics() if cache is not None else {"enabled": False}
    if diagnostics.get("enabled") is False:  # the engine's null cache: caching is off
        return []
    rows = []
    for name, stats in tier_stats(cache, diagnostics).items():
        row = {"name": name, "built": stats is not None, "bytes": None, "capacity_bytes": None, "entries": None}
        if stats is not None:
            row.update(bytes=stats.get("bytes"), capacity_bytes=first_of(stats, CAPACITY_KEYS),
                       entries=first_of(stats, ENTRY_KEYS))
        row.update(tier_counters(ctx, name) if counters else NO_COUNTERS)
        rows.append(row)
    return rows


def tier_stats(cache, diagnostics: dict) -> dict[str, Optional[dict]]:
    """Tier name -> its stats() (None when registered but not built), from the diagnostics."""
    resident = [cache.resident_name] if cache.resident is not None else []
    names = dict.fromkeys([*resident, *cache.backup_tiers, *cache.tiers.registered])
    return {name: diagnostics[name] for name in names if name in diagnostics}


def tier_counters(ctx, tier: str) -> dict[str, Optional[int]]:
    """Requests looked up in ``tier`` and served from it (the cache's prometheus counters)."""
    registry = ctx.metrics.registry
    lookups = registry.get_sample_value("kvgate_cache_lookups_total", {"tier": tier})
    hits = registry.get_sample_value("kvgate_cache_lookup_hits_total", {"tier": tier})
    if lookups is None or hits is None:
        return NO_COUNTERS
    return {"lookups": int(lookups), "hits": int(hits), "misses": int(lookups - hits)}


def request_rows(ctx, tenant: Tenant, exact: bool, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` requests ``tenant`` may see, newest first."""
    mine = [r for r in recent_requests_of(ctx).recent() if tenant.admin or r.tenant == tenant.name]
    return [request_row(ctx, summary, exact) for summary in reversed(mine[-limit:])]


def request_row(ctx, summary: RequestSummary, exact: bool) -> dict[str, Any]:
    usage = Usage(prompt_tokens=summary.prompt_tokens, completion_tokens=summary.completion_tokens,
                  cached_tokens_device=summary.cached_device, cached_tokens_ssd=summary.cached_ssd)
    if not exact:
        usage = ctx.pipeline.reported(usage)
    rate = summary.decode_tokens_per_s
    return {"id": summary.id, "time": summary.time, "tenant": summary.tenant, "reason": summary.reason,
            "prompt_tokens": usage.prompt_tokens, "cached_device": usage.cached_tokens_device,
            "cached_ssd": usage.cached_tokens_ssd, "computed": usage.prompt_tokens - usage.cached_tokens,
            "replayed_tokens": summary.replayed_tokens, "completion_tokens": usage.completion_tokens,
            "ttft_s": summary.ttft_s, "tokens_per_s": None if rate is None else round(rate, 2)}


def almost_hits(ctx, tenant: Tenant) -> list[dict[str, Any]]:
    cache = cache_manager(ctx)
    data = cache.diagnostics() if cache is not None else {"enabled": False}
    if data.get("enabled") is False:
        return []
    seen = scoped({"almost_hits": data.get("almost_hits", [])}, tenant, ctx.pipeline.namespace_owners)
    return list(reversed(seen["almost_hits"]))


def overview(ctx, tenant: Tenant, operator: bool, limit: int, facts: dict[str, Any]) -> dict[str, Any]:
    """The page's data as ``tenant`` may see it (``operator``: its key may read ``/metrics``)."""
    return {"model": facts, "tenant": tenant.name, "operator": operator,
            "tiers": tier_rows(ctx, counters=operator),
            "requests": request_rows(ctx, tenant, exact=operator, limit=limit),
            "almost_hits": almost_hits(ctx, tenant), "progress": BOARD.in_flight()}

"""Plugin: ``GET /v1/cache/diagnostics`` -- recent almost-hits, lookups, pins and tier sizes as JSON.

Scoped to the asking tenant (:mod:`kvgate.core.tenants`): an admin key sees everything; any other
key sees the almost-hits and lookups of the namespaces its tenant reaches (its own, its salted
ones, its shared namespace), and almost-hit *text* only where its tenant owns both sides, that is
in a namespace no other tenant reaches. In a shared namespace the stored side may be another
tenant's prompt, so the text is redacted there: counts and positions only (``text_redacted``).
Retention pins (``pins``) show their totals to everyone, their entries and bytes to their tenant.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.hookspecs import hookimpl

TEXT_FIELDS = ("text_before", "stored_after", "prompt_after", "stored_pieces", "prompt_pieces")


def cache_manager(ctx) -> Any:
    """The engine's cache (a CacheManager, or the engine's null cache when caching is off)."""
    engine = getattr(ctx.pipeline, "engine", None)
    return getattr(engine, "cache", None)


def scoped(data: dict[str, Any], tenant, owners) -> dict[str, Any]:
    """``data`` as ``tenant`` may see it (``owners``: the pipeline's NamespaceOwners)."""
    if tenant.admin:
        return data

    def reached(item: dict) -> bool:
        owner = owners.owner(item.get("namespace", "")) if owners is not None else None
        return owner is not None and owner.scope == tenant.cache_scope

    def view(item: dict) -> dict:
        owner = owners.owner(item.get("namespace", ""))
        if owner.tenant == tenant.name:
            return item
        return {**{key: value for key, value in item.items() if key not in TEXT_FIELDS}, "text_redacted": True}

    return {**data, "almost_hits": [view(i) for i in data.get("almost_hits", []) if reached(i)],
            "recent_lookups": [i for i in data.get("recent_lookups", []) if reached(i)],
            **({"pins": own_pins(data["pins"], tenant.name)} if "pins" in data else {})}


def own_pins(pins: dict[str, Any], tenant: str) -> dict[str, Any]:
    """The pin summary with only ``tenant``'s own pins and bytes (the totals stay)."""
    return {**pins, "by_tenant": {name: held for name, held in pins["by_tenant"].items() if name == tenant},
            "entries": [entry for entry in pins["entries"] if entry["tenant"] == tenant]}


def build_routes(ctx) -> list:
    from litestar import Request, get

    from kvgate.core.http.routing import openai_error_body, protocol_router
    from kvgate.core.tenants import tenant_of

    @get(["/cache/diagnostics", "/v1/cache/diagnostics"], sync_to_thread=False)
    def diagnostics(request: Request) -> dict[str, Any]:
        cache = cache_manager(ctx)
        if cache is None or not hasattr(cache, "diagnostics"):
            return {"enabled": False}
        return scoped(cache.diagnostics(), tenant_of(request), getattr(ctx.pipeline, "namespace_owners", None))

    return [protocol_router(path="/", handlers=[diagnostics], body=openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register("cache_diagnostics", build_routes)

"""Plugin: ``GET /v1/cache/diagnostics`` -- recent almost-hits, lookups and tier sizes as JSON."""

from __future__ import annotations

from typing import Any

from kvgate.core.hookspecs import hookimpl


def cache_manager(ctx) -> Any:
    """The engine's cache (a CacheManager, or the engine's null cache when caching is off)."""
    engine = getattr(ctx.pipeline, "engine", None)
    return getattr(engine, "cache", None)


def build_routes(ctx) -> list:
    from litestar import get

    from kvgate.core.http import openai_error_body, protocol_router

    @get(["/cache/diagnostics", "/v1/cache/diagnostics"], sync_to_thread=False)
    def diagnostics() -> dict[str, Any]:
        cache = cache_manager(ctx)
        if cache is None or not hasattr(cache, "diagnostics"):
            return {"enabled": False}
        return cache.diagnostics()

    return [protocol_router(path="/", handlers=[diagnostics], body=openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register("cache_diagnostics", build_routes)

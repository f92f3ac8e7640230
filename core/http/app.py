"""The Litestar application factory: loads the model, builds the pipeline, mounts every adapter."""

from __future__ import annotations

import hashlib
import logging
import sys
from typing import Any, Optional

import pluggy
import torch
from litestar import Litestar, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig

from kvgate.core.http.body import BodyLimits
from kvgate.core.config import Config, read_config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.loading.dialect_choice import build_chat_format
from kvgate.core.engine.drafter_choice import check_drafter_named, drafter_registry
from kvgate.core.engine.engine import Engine
from kvgate.core.errors import KvgateError
from kvgate.core.http.routing import api_key_from_headers, openai_error_body, protocol_router
from kvgate.core.http.tenant_policies import build_tenant_policy
from kvgate.core.observe.metrics import Metrics
from kvgate.core.loading.model_loading import load_runtime, on_passing_thread
from kvgate.core.pipeline.pipeline import Pipeline
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.observe.progress import BOARD
from kvgate.core.pipeline.request_checks import build_request_checks
from kvgate.core.request_trace import build_observers
from kvgate.core.asgi_wrapper import build_asgi_wrappers
from kvgate.core.server import ServerContext
from kvgate.core.tokenizer.service import TokenizerService
from kvgate.core.tokenizer_cache import tokenizer_cache_factory

log = logging.getLogger("kvgate")
# The engine thread needs the GIL back after every torch op (thousands a decode step); while another
# thread runs Python (a costly fence's schema build), CPython's default 5 ms switch interval makes it
# wait up to that long each time: a 2 s build slowed a concurrent 0.3 s request to 2.0 s, 0.9 s at 0.5 ms.
GIL_SWITCH_S = 0.0005


def namespace_for(runtime, dialect_name: str, chat_format, tokenizer_fingerprint: str) -> str:
    template = chat_format.source or chat_format.name
    try:
        from kvgate.core.cache.namespace import namespace_for as cache_namespace

        return cache_namespace(runtime.fingerprint, runtime.info.dtype, template, dialect_name, tokenizer_fingerprint)
    except ImportError:
        parts = [runtime.fingerprint, runtime.info.dtype, template, dialect_name, tokenizer_fingerprint]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def build_cache(config: Config, pm: pluggy.PluginManager, runtime, metrics: Metrics):
    if not config.cache.enabled:
        return None
    try:
        from kvgate.core.cache.build import build_cache_manager
    except ImportError:
        log.warning("prefix cache unavailable: kvgate.core.cache is not installed")
        return None
    return build_cache_manager(config, runtime, pm, metrics.registry)


def build_fence_builder(config: Config, pm: pluggy.PluginManager, runtime, dialect, chat_format):
    """request -> RequestFence or None; fences and guards are each switched by their own config."""
    try:
        from kvgate.core.fence import build_request_fence, check_schema_limits, prepare_fences, tokenizer_info
    except ImportError:
        log.warning("token fences unavailable: kvgate.core.fence is not installed")
        return None
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    prepare_fences(info, dialect, config, pm)
    def build(request):
        return build_request_fence(request, dialect, info, config, pm, start_in=chat_format.parser_start(request))

    from kvgate.core.fence.admission import FenceAdmission

    return FenceAdmission(build, config.fence.compile_budget_s,
                          check=lambda request: check_schema_limits(request, info, config, pm))


def build_context(config: Config, pm: pluggy.PluginManager) -> ServerContext:
    tenant_policy = build_tenant_policy(config, pm)  # a bad key entry fails before the model loads
    if config.model.threads:
        torch.set_num_threads(config.model.threads)
    metrics = Metrics()
    drafters = drafter_registry(pm)
    check_drafter_named(config.engine, drafters)  # before the model loads
    runtime = load_runtime(config, pm)
    tokenizer_service = TokenizerService(runtime.tokenizer, tokenizer_cache_factory(config, pm, metrics.registry))
    dialect_name, dialect, chat_format = build_chat_format(config, pm, runtime)
    namespace = namespace_for(runtime, dialect_name, chat_format, tokenizer_service.fingerprint)
    cache = build_cache(config, pm, runtime, metrics)
    engine = Engine(runtime, config.engine, cache, metrics, drafters=drafters)  # its decode step follows [engine]
    pipeline = Pipeline(runtime, engine, tokenizer_service, chat_format, dialect, namespace, config, metrics,
                        build_fence_builder(config, pm, runtime, dialect, chat_format))
    pipeline.dialect_name = dialect_name
    pipeline.request_checks = build_request_checks(pm, dialect, runtime.tokenizer)
    log.info("serving %r: %s, dialect %s, context %d", config.model.name, runtime.info.architecture, dialect_name,
             runtime.info.max_context)
    if pipeline.sampling_defaults.values:
        log.info("sampling defaults for requests that leave them out: %s", pipeline.sampling_defaults.describe())
    if pipeline.output_cap.clamp:
        log.info("output clamp: no reply runs past %s", pipeline.output_cap.describe())
    return ServerContext(config=config, pm=pm, pipeline=pipeline, metrics=metrics,
                         tokenizer_service=tokenizer_service, state_dir=config.path_in_state("", ""),
                         tenant_policy=tenant_policy)


def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status in (404, 405):
        message = f"No route for {request.method} {request.url.path}."
    elif status < 500:
        message = str(getattr(exc, "detail", "") or "Bad request.")
    else:
        message = "Internal server error."
        log.error("%s %s: %s %s: %s", request.method, request.url.path, status, type(exc).__name__, exc, exc_info=exc)
    path = request.url.path.rstrip("/")
    if path.endswith(("/messages", "/count_tokens")) or path.startswith(("/v1/messages/", "/messages/")):
        kind = "not_found_error" if status == 404 else "api_error" if status >= 500 else "invalid_request_error"
        return Response({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)
    error = KvgateError(message, code="not_found" if status == 404 else None)
    error.kind = "invalid_request_error"
    return Response(openai_error_body(error), status_code=status)


def operations_routes(ctx: ServerContext) -> list:
    @get(["/health", "/v1/health"], sync_to_thread=False)
    def health(request: Request) -> dict[str, Any]:
        """Open to all; with keys configured, the KV pool's occupancy (which tells other tenants'
        prompt sizes to a block) only for an operator's key."""
        engine = ctx.pipeline.engine
        data = {"status": "ok", "model": ctx.model_name, "requests_in_flight": engine.load(),
                "progress": BOARD.in_flight()}
        operators = ctx.tenant_policy.operators()
        if not operators.authenticates() or operators.tenant_for(api_key_from_headers(request.headers)) is not None:
            data["kv_pool"] = engine.runtime.pool_stats()
        return data

    @get("/metrics", sync_to_thread=False)
    def metrics() -> Response:
        return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")

    # only /health is open; /metrics needs a key, an admin key once several tenants are configured
    return [health, protocol_router("/", [metrics], openai_error_body, api_key=ctx.tenant_policy.operators())]


def build_services(ctx: ServerContext, pm: pluggy.PluginManager) -> list:
    """The ``register_services`` services this config runs (a builder returning None runs none)."""
    services = collect(pm, "register_services", "service")
    built = [services.get(name)(ctx) for name in services.names()]
    return [service for service in built if service is not None]


def create_app(config: Optional[Config] = None, pm: Optional[pluggy.PluginManager] = None) -> Litestar:
    """The app for ``config`` (default: no file) and ``pm`` (default: the installed plugins, less
    ``[plugins] disabled``); the plugin sections are validated for ``pm`` before anything loads."""
    sys.setswitchinterval(GIL_SWITCH_S)
    config = config or read_config()
    pm = pm or build_plugin_manager(disabled=config.plugins.disabled)
    bind_plugin_sections(config, pm)
    ctx = on_passing_thread(lambda: build_context(config, pm))  # the model loads off the main thread
    ctx.pipeline.observers = build_observers(ctx, pm)
    wrappers = build_asgi_wrappers(ctx, pm)
    handlers = operations_routes(ctx)
    adapters = collect(pm, "register_adapters", "adapter")
    for name in adapters.names():
        handlers.extend(adapters.get(name)(ctx))

    services = build_services(ctx, pm)

    async def startup() -> None:
        ctx.pipeline.engine.start()
        for service in services:
            await service.start()

    async def shutdown() -> None:
        for service in reversed(services):
            try:
                await service.stop()
            except Exception:  # one service failing to stop must not keep the engine running
                log.exception("stopping service %r failed", service)
        ctx.pipeline.engine.stop()
        cache = ctx.pipeline.engine.cache
        cache.close()

    app = Litestar(route_handlers=handlers, exception_handlers={HTTPException: _not_found},
                   on_startup=[startup], on_shutdown=[shutdown],
                   middleware=wrappers,  # register_asgi_wrappers, the first outermost
                   request_max_body_size=config.server.max_body_bytes + 1024 * 1024,  # ours refuses first
                   openapi_config=OpenAPIConfig(title="kvgate", version="1", openapi_router=protocol_router(
                       "/schema", [], openai_error_body, api_key=ctx.api_key)))  # behind the key too
    app.state.ctx = ctx
    app.state.body_limits = BodyLimits.of(config.server)
    return app

"""Plugin: the worker-information routes a router probes when it registers a kvgate worker.

SMG (and SGLang-style routers) call these at registration and then poll the load routes:

- ``GET /version``                      -> ``{"version"}``
- ``GET /server_info`` (and ``/get_server_info``) -> the serving limits: context length, batch and
  queue sizes, block size, KV pool size, tensor/data parallel sizes (1 and 1).
- ``GET /model_info`` (and ``/get_model_info``)   -> the model: path, served name, architecture,
  vocabulary size, dtype, device, dialect, ``is_generation: true``.
- ``GET /loads`` (``?model=`` accepted) and ``GET /v1/loads`` -> ``{"loads": [{"worker_generation",
  "num_running_reqs", "num_waiting_reqs", "token_usage", ...}]}``: requests decoding and waiting,
  and the share of the KV pool's blocks in use.

Every value is read from the running server; nothing is a placeholder. The routes need the API
key like every other route but ``/health``.
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from kvgate.core.hookspecs import hookimpl

STARTED = time.time()


def kvgate_version() -> str:
    try:
        return metadata.version("kvgate")
    except metadata.PackageNotFoundError:
        return "unknown"


def server_info(ctx) -> dict[str, Any]:
    pipeline, engine = ctx.pipeline, ctx.pipeline.engine
    config = ctx.config.engine
    pool = engine.runtime.pool_stats()
    return {"version": kvgate_version(), "served_model_name": ctx.model_name,
            "max_model_len": pipeline.runtime.info.max_context,
            "context_length": pipeline.runtime.info.max_context,
            "max_running_requests": config.max_batch, "max_queued_requests": config.max_queue,
            "page_size": engine.runtime.block_size, "max_total_num_tokens": pool["blocks_total"] * engine.runtime.block_size,
            "chunked_prefill_size": config.prefill_chunk, "tp_size": 1, "dp_size": 1,
            "speculative_ngram": config.speculative_ngram,
            "speculative": config.speculative, "started_at": int(STARTED)}


def model_info(ctx) -> dict[str, Any]:
    info = ctx.pipeline.runtime.info
    return {"model_path": ctx.config.model.path or "embedded", "tokenizer_path": ctx.config.model.path or "embedded",
            "served_model_name": ctx.model_name, "is_generation": True, "architecture": info.architecture,
            "vocab_size": info.vocab_size, "max_context_length": info.max_context, "dtype": info.dtype,
            "device": info.device, "dialect": getattr(ctx.pipeline, "dialect_name", "")}


def loads(ctx) -> dict[str, Any]:
    engine = ctx.pipeline.engine
    counts, pool = engine.loads(), engine.runtime.pool_stats()
    total = max(pool["blocks_total"], 1)
    usage = (pool["blocks_total"] - pool["blocks_free"]) / total
    return {"timestamp": time.time(), "loads": [{
        "worker_generation": f"{ctx.model_name}-{int(STARTED)}", "dp_rank": 0,
        "num_running_reqs": counts["running"], "num_waiting_reqs": counts["waiting"],
        "num_in_flight_reqs": counts["in_flight"], "token_usage": round(usage, 6),
        "kv_blocks_total": pool["blocks_total"], "kv_blocks_free": pool["blocks_free"]}]}


def build_routes(ctx) -> list:
    from litestar import get

    from kvgate.core.http.routing import openai_error_body, protocol_router

    @get("/version", sync_to_thread=False)
    def version() -> dict[str, Any]:
        return {"version": kvgate_version()}

    @get(["/server_info", "/get_server_info"], sync_to_thread=False)
    def server() -> dict[str, Any]:
        return server_info(ctx)

    @get(["/model_info", "/get_model_info"], sync_to_thread=False)
    def model() -> dict[str, Any]:
        return model_info(ctx)

    @get(["/loads", "/v1/loads", "/get_loads"], sync_to_thread=False)
    def load() -> dict[str, Any]:
        return loads(ctx)

    return [protocol_router(path="/", handlers=[version, server, model, load], body=openai_error_body,
                            api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register("worker_info", build_routes)

"""``GET /v1/models`` and ``GET /v1/models/{id}``, OpenAI shape or, when the request carries an
``anthropic-version`` header, Anthropic shape (Claude Code gateway discovery).

OpenAI:    ``{"object":"list","data":[{"id","object":"model","created":int,"owned_by":"kvgate","max_model_len":int}]}``
(``max_model_len`` as vLLM reports it: routers such as SMG read the context length from it)
Anthropic: ``{"data":[{"type":"model","id","display_name","created_at":RFC3339,"lifecycle":"active"}],
"has_more":false,"first_id","last_id"}``

Listed ids: the served model name, then every alias that is a plain name (no glob characters).
A single model is looked up through ``ctx.resolve_model`` (aliases patterns included) and echoed
under the requested id; an unknown id is a 404 in the shape the headers asked for.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from litestar import Request, Response, get

from kvgate.core.errors import ModelNotFound

_GLOB_CHARS = set("*?[")


def listed_ids(ctx) -> list[str]:
    aliases = [a for a in ctx.config.model.aliases if not _GLOB_CHARS & set(a) and a != ctx.model_name]
    return [ctx.model_name, *aliases]


def openai_model(model_id: str, created: int, max_model_len: int = 0) -> dict[str, Any]:
    body = {"id": model_id, "object": "model", "created": created, "owned_by": "kvgate"}
    if max_model_len:
        body["max_model_len"] = max_model_len
    return body


def anthropic_model(model_id: str, created: int) -> dict[str, Any]:
    stamp = dt.datetime.fromtimestamp(created, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": stamp, "lifecycle": "active"}


def model_list(ids: list[str], created: int, anthropic: bool, max_model_len: int = 0) -> dict[str, Any]:
    if anthropic:
        return {"data": [anthropic_model(i, created) for i in ids], "has_more": False,
                "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None}
    return {"object": "list", "data": [openai_model(i, created, max_model_len) for i in ids]}


def anthropic_not_found(exc: ModelNotFound) -> Response:
    body = {"type": "error", "error": {"type": "not_found_error", "message": exc.message}}
    return Response(body, status_code=404, media_type="application/json")


def model_routes(ctx) -> list:
    created = int(time.time())

    @get(["/v1/models", "/models"])
    async def list_models(request: Request) -> Response:
        anthropic = "anthropic-version" in request.headers
        body = model_list(listed_ids(ctx), created, anthropic, ctx.pipeline.runtime.info.max_context)
        return Response(body, media_type="application/json")

    @get(["/v1/models/{model_id:path}", "/models/{model_id:path}"])
    async def retrieve_model(request: Request, model_id: str) -> Response:
        model_id = model_id.lstrip("/")
        anthropic = "anthropic-version" in request.headers
        try:
            if not model_id:
                raise ModelNotFound("A model id is required.", param="model")
            ctx.resolve_model(model_id)
        except ModelNotFound as exc:
            if anthropic:
                return anthropic_not_found(exc)
            raise
        max_model_len = ctx.pipeline.runtime.info.max_context
        body = anthropic_model(model_id, created) if anthropic else openai_model(model_id, created, max_model_len)
        return Response(body, media_type="application/json")

    return [list_models, retrieve_model]

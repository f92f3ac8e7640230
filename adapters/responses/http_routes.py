"""HTTP routes of the Responses API (each served with and without the ``/v1`` prefix).

POST   /v1/responses                       create (JSON, or SSE when ``stream: true``)
GET    /v1/responses/{id}                  a stored response (404 when unknown or ``store: false``)
DELETE /v1/responses/{id}                  ``{"id", "object": "response.deleted", "deleted": true}``
GET    /v1/responses/{id}/input_items      ``{"object": "list", "data": [...], ...}``
POST   /v1/responses/input_tokens          ``{"object": "response.input_tokens", "input_tokens": N}``
POST   /v1/responses/compact               ``{"object": "response.compaction", "output": [...], ...}``
                                           (:mod:`.compaction`)

SSE framing: ``event: <type>`` + ``data: <json>``; a ``: keep-alive`` comment during a long prefill.
A JSON (non-streaming) request watches the ASGI channel for ``http.disconnect`` while it waits:
a client that leaves cancels its generation (answered 499, which nobody reads).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, AsyncIterator, Awaitable, Optional

from litestar import Request, Response, delete, get, post

from kvgate.core.errors import NotFound
from kvgate.core.http.client_gone import http_disconnect, unless_gone_first
from kvgate.core.http.openapi import json_body_operation
from kvgate.core.http.routing import read_json_object, sse_event, sse_response
from kvgate.core.http.request_hints import apply_hints
from kvgate.core.tenants import tenant_of
from kvgate.adapters.responses.compaction import compact
from kvgate.adapters.responses.run import HEARTBEAT, Run, begin, complete, parse_call
from kvgate.adapters.responses.schema import (COMPACT_ANSWERS, INPUT_TOKENS_ANSWERS, RESPONSES_ANSWERS,
                                              RESPONSES_REQUEST)
from kvgate.adapters.responses.store import ResponseStore

log = logging.getLogger("kvgate.responses")
CACHE_KEY_HEADER = "x-kvgate-cache-key"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left; nobody reads the reply


def both(path: str) -> list[str]:
    return [f"/v1{path}", path]


def _json(data: Any) -> Response:
    return Response(data, status_code=200, media_type="application/json")


def _json_unless_gone(data: Optional[Any]) -> Response:
    return Response(b"", status_code=CLIENT_CLOSED_REQUEST) if data is None else _json(data)


async def unless_client_gone(work: Awaitable[Any], request: Request) -> Optional[Any]:
    """The result of ``work``, or None when the client disconnected first (``work`` is cancelled:
    closing the pipeline's event stream cancels the sequence in the engine)."""
    task = await unless_gone_first(work, http_disconnect(request.receive))
    if task.cancelled():
        log.info("responses: client disconnected; request cancelled")
        return None
    return task.result()


async def complete_unless_gone(run: Run, request: Request) -> Optional[dict[str, Any]]:
    try:
        return await unless_client_gone(complete(run), request)
    finally:
        if run.stream is not None:  # closed already, unless the client left before draining began
            await run.stream.aclose()


async def sse_chunks(run: Run) -> AsyncIterator[bytes]:
    async for event in run.events():
        yield b": keep-alive\n\n" if event is HEARTBEAT else sse_event(event, event["type"])


def http_handlers(ctx: Any, store: ResponseStore) -> list:
    def stored(response_id: str, request: Request):
        record = store.get(response_id, tenant_of(request).name)  # another tenant's reads as unknown
        if record is None:
            raise NotFound(f"No response found with id '{response_id}'.", param="response_id")
        return record

    @post(both("/responses"), status_code=200,
          operation_class=json_body_operation(RESPONSES_REQUEST, RESPONSES_ANSWERS))
    async def create_response(request: Request) -> Response:
        body = await read_json_object(request)
        call = parse_call(ctx, store, body, header_cache_key=request.headers.get(CACHE_KEY_HEADER),
                          tenant=tenant_of(request))
        apply_hints(call.chat, request.headers)
        run = await begin(ctx, store, call, streaming=call.stream)
        if call.stream:
            return sse_response(sse_chunks(run))
        return _json_unless_gone(await complete_unless_gone(run, request))

    @get(both("/responses/{response_id:str}"))
    async def retrieve_response(response_id: str, request: Request) -> Response:
        return _json(stored(response_id, request).response)

    @delete(both("/responses/{response_id:str}"), status_code=200)
    async def delete_response(response_id: str, request: Request) -> Response:
        stored(response_id, request)
        store.delete(response_id, tenant_of(request).name)
        return _json({"id": response_id, "object": "response.deleted", "deleted": True})

    @get(both("/responses/{response_id:str}/input_items"))
    async def list_input_items(response_id: str, request: Request) -> Response:
        items = stored(response_id, request).input_items
        return _json({"object": "list", "data": items, "has_more": False,
                      "first_id": items[0]["id"] if items else None, "last_id": items[-1]["id"] if items else None})

    @post(both("/responses/input_tokens"), status_code=200,
          operation_class=json_body_operation(RESPONSES_REQUEST, INPUT_TOKENS_ANSWERS))
    async def count_input_tokens(request: Request) -> Response:
        body = await read_json_object(request)
        call = parse_call(ctx, store, body, header_cache_key=request.headers.get(CACHE_KEY_HEADER),
                          tenant=tenant_of(request))
        count = ctx.pipeline.count_prompt_tokens(call.chat)
        if inspect.isawaitable(count):
            count = await count
        return _json({"object": "response.input_tokens", "input_tokens": int(count)})

    @post(both("/responses/compact"), status_code=200,
          operation_class=json_body_operation(RESPONSES_REQUEST, COMPACT_ANSWERS))
    async def compact_conversation(request: Request) -> Response:
        body = await read_json_object(request)
        call = parse_call(ctx, store, body, header_cache_key=request.headers.get(CACHE_KEY_HEADER),
                          tenant=tenant_of(request))
        apply_hints(call.chat, request.headers)
        compacted = await unless_client_gone(compact(ctx.pipeline, call, ctx.config.engine.default_max_tokens), request)
        return _json_unless_gone(compacted)

    return [create_response, retrieve_response, delete_response, list_input_items, count_input_tokens,
            compact_conversation]

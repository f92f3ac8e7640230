"""``POST /v1/chat/completions`` (and ``/chat/completions``): body -> ChatRequest -> pipeline -> wire.

Errors before the first event (bad input, unknown model, context overflow, overload) are plain HTTP
errors in OpenAI shape (the protocol router renders them); errors after the SSE headers went out
become an in-stream ``data: {"error": ...}`` frame. Leaving the event iterator early (client gone)
closes it, which cancels the request in the pipeline; a non-streaming request watches the ASGI
channel for ``http.disconnect`` while it waits, so an abandoned request is cancelled too.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable

from litestar import Request, Response, post

from kvgate.adapters.openai_chat.completion import Collected, completion_object
from kvgate.adapters.openai_chat.fields import typed
from kvgate.adapters.openai_chat.render import ResponseMeta, generation_failed_message, log, merge_issues, new_meta
from kvgate.adapters.openai_chat.request import to_chat_request
from kvgate.adapters.openai_chat.schema import CHAT_ANSWERS, CHAT_REQUEST
from kvgate.adapters.openai_chat.stream import ChunkRenderer
from kvgate.core.errors import KvgateError
from kvgate.core.http.client_gone import http_disconnect, unless_gone_first
from kvgate.core.http.openapi import json_body_operation
from kvgate.core.http.routing import read_json_object, sse_response
from kvgate.core.tenants import scope_request, tenant_of


def chat_route(ctx):
    @post(["/v1/chat/completions", "/chat/completions"], status_code=200,
          operation_class=json_body_operation(CHAT_REQUEST, CHAT_ANSWERS))
    async def chat_completions(request: Request) -> Response:
        body = await read_json_object(request)
        requested = typed(body, "model", str, "")
        served = ctx.resolve_model(requested)
        chat = to_chat_request(body, served, ctx.pipeline.model_info.has_vision, request.headers)
        scope_request(chat, tenant_of(request), body)
        streaming = body.get("stream") is True
        options = body.get("stream_options") or {}
        meta = new_meta(requested or served, chat, include_usage=streaming and options.get("include_usage") is True)
        events = ctx.pipeline.stream(chat)
        if streaming:
            return await stream_response(events, meta)
        return await complete(events, meta, request.receive)

    return chat_completions


async def complete(events: AsyncIterator, meta: ResponseMeta, receive: Callable[[], Awaitable[dict]]) -> Response:
    collected = Collected(meta)
    try:
        drain = await unless_gone_first(_drain(events, collected), http_disconnect(receive))
    finally:
        await events.aclose()
    if drain.cancelled():
        log.info("%s: client disconnected; request cancelled", meta.id)
        return Response(b"", status_code=499)  # nginx's "client closed request"; nobody reads it
    drain.result()
    finished = collected.finished
    if finished is None:
        raise KvgateError("Generation ended without a result.")
    if finished.reason == "error":
        raise KvgateError(generation_failed_message(merge_issues(collected.issues, finished)))
    return Response(completion_object(collected), media_type="application/json")


async def _drain(events: AsyncIterator, collected: Collected) -> None:
    async for event in events:
        collected.add(event)




async def stream_response(events: AsyncIterator, meta: ResponseMeta) -> Any:
    """Wait for ``Started`` (so refusals are ordinary HTTP errors), then stream SSE frames."""
    try:
        first = await events.__anext__()
    except StopAsyncIteration:
        await events.aclose()
        raise KvgateError("Generation ended without a result.") from None
    except BaseException:
        await events.aclose()
        raise
    return sse_response(sse_frames(first, events, ChunkRenderer(meta)))


async def sse_frames(first: Any, events: AsyncIterator, renderer: ChunkRenderer) -> AsyncIterator[bytes]:
    done = False
    try:
        for frame in renderer.render(first):
            yield frame
        async for event in events:
            for frame in renderer.render(event):
                done = done or frame.startswith(b"data: [DONE]")
                yield frame
        if not done:
            for frame in renderer.error_frames(KvgateError("Generation ended without a result.")):
                yield frame
    except KvgateError as exc:
        for frame in renderer.error_frames(exc):
            yield frame
    except Exception:
        log.exception("%s: streaming failed", renderer.meta.id)
        for frame in renderer.error_frames(KvgateError("Internal server error.")):
            yield frame
    finally:
        await events.aclose()

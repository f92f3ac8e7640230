"""Litestar routes of the Anthropic adapter."""

from __future__ import annotations

import inspect
import logging
from typing import Any, AsyncIterator

from litestar import Request, Response, head, post

from kvgate.adapters.anthropic.billing import billing_mode
from kvgate.adapters.anthropic.blocks import expect
from kvgate.core.http.request_hints import apply_hints
from kvgate.adapters.anthropic.errors import anthropic_error_body, error_message, error_type
from kvgate.adapters.anthropic.message import fold_message
from kvgate.adapters.anthropic.request import build_chat_request
from kvgate.adapters.anthropic.schema import (COUNT_TOKENS_ANSWERS, COUNT_TOKENS_REQUEST, MESSAGES_ANSWERS,
                                              MESSAGES_REQUEST)
from kvgate.adapters.anthropic.stream import MessageStream, error_event
from kvgate.core.errors import KvgateError
from kvgate.core.http.client_gone import http_disconnect, unless_gone_first
from kvgate.core.http.openapi import json_body_operation
from kvgate.core.http.routing import protocol_router, read_json_object, sse_event, sse_response
from kvgate.core.tenants import scope_request, tenant_of

MESSAGES_PATHS = ["/v1/messages", "/messages"]
COUNT_PATHS = ["/v1/messages/count_tokens", "/messages/count_tokens"]
PROBE_PATHS = ["/", "/api/hello"]  # Claude Code calls HEAD / before its first request
log = logging.getLogger("kvgate.anthropic")


def build_routes(ctx) -> list:
    billing = billing_mode(ctx.config.section("anthropic").normalize_billing_header)

    def chat_request(request: Request, body: dict[str, Any]):
        requested = body.get("model")
        expect(requested is None or isinstance(requested, str), "must be a string", "model")
        served = ctx.resolve_model(requested)
        chat = build_chat_request(body, served, request.headers, billing)
        return requested or served, apply_hints(scope_request(chat, tenant_of(request), body), request.headers)

    @post(MESSAGES_PATHS, status_code=200, operation_class=json_body_operation(MESSAGES_REQUEST, MESSAGES_ANSWERS))
    async def create_message(request: Request) -> Response:
        body = await read_json_object(request)
        expect(body.get("stream") in (None, True, False), "must be a boolean", "stream")
        model, chat = chat_request(request, body)
        stream = MessageStream(f"msg_{chat.request_id}", model)
        events = ctx.pipeline.stream(chat)
        if body.get("stream"):
            first = await first_event(events)
            return sse_response(sse_chunks(stream, first, events))
        message = await unless_gone_first(whole_message(stream, events), http_disconnect(request.receive))
        if message.cancelled():
            log.info("%s: client disconnected; request cancelled", stream.message_id)
            return Response(b"", status_code=499)  # nginx's "client closed request"; nobody reads it
        return Response(message.result(), status_code=200)

    @post(COUNT_PATHS, status_code=200,
          operation_class=json_body_operation(COUNT_TOKENS_REQUEST, COUNT_TOKENS_ANSWERS))
    async def count_tokens(request: Request) -> Response:
        body = await read_json_object(request)
        _model, chat = chat_request(request, body)
        count = ctx.pipeline.count_prompt_tokens(chat)
        if inspect.isawaitable(count):
            count = await count
        return Response({"input_tokens": count}, status_code=200)

    @head(PROBE_PATHS)
    async def probe() -> None:
        return None

    return [
        protocol_router("/", [create_message, count_tokens], anthropic_error_body, api_key=ctx.api_key),
        protocol_router("/", [probe], anthropic_error_body),
    ]


async def first_event(events) -> Any:
    """The stream's first event; errors raised before it become ordinary HTTP errors."""
    try:
        return await events.__anext__()
    except BaseException:
        await events.aclose()
        raise


async def whole_message(stream: MessageStream, events) -> dict[str, Any]:
    wire = []
    try:
        async for event in events:
            wire.extend(stream.feed(event))
    finally:
        await events.aclose()
    message = fold_message(wire) if stream.finished else None
    if message is None:
        raise KvgateError("Generation failed on the server.")
    return message


async def sse_chunks(stream: MessageStream, first: Any, events) -> AsyncIterator[bytes]:
    try:
        for name, data in stream.feed(first):
            yield sse_event(data, name)
        async for event in events:
            for name, data in stream.feed(event):
                yield sse_event(data, name)
        if not stream.finished:
            name, data = error_event("api_error", "The generation ended without finishing.")
            yield sse_event(data, name)
    except Exception as exc:  # a failure after the 200 went out: report it in-stream
        error = exc if isinstance(exc, KvgateError) else KvgateError("Internal server error.")
        name, data = error_event(error_type(error.status), error_message(error))
        yield sse_event(data, name)
    finally:
        await events.aclose()

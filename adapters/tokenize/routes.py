"""Handlers and request parsing of ``/v1/tokenize`` and ``/v1/detokenize`` (wire shapes in the package docstring)."""

from __future__ import annotations

from typing import Any, Optional

import anyio
from litestar import Request, Response, post

from kvgate.adapters.openai_chat.fields import typed
from kvgate.adapters.openai_chat.messages import convert_messages
from kvgate.adapters.openai_chat.tools import convert_tools
from kvgate.adapters.tokenize.schema import DETOKENIZE_ANSWERS, DETOKENIZE_REQUEST, TOKENIZE_ANSWERS, TOKENIZE_REQUEST
from kvgate.core.errors import InvalidRequest
from kvgate.core.http.openapi import json_body_operation
from kvgate.core.http.routing import read_json_object
from kvgate.core.tenants import scoped_namespace, tenant_of
from kvgate.core.types import ChatRequest


def prompt_text(ctx, body: dict, model: str) -> str:
    """The text to tokenize: ``prompt`` as given, or ``messages`` rendered by the chat format."""
    has_prompt, has_messages = body.get("prompt") is not None, body.get("messages") is not None
    if has_prompt == has_messages:
        raise InvalidRequest("Give exactly one of 'prompt' (a string) or 'messages' (an array).",
                             param="messages" if has_prompt else "prompt")
    if has_prompt:
        return typed(body, "prompt", str, "")
    generation_prompt = typed(body, "add_generation_prompt", bool, "", default=True)
    chat = ChatRequest(model=model, messages=convert_messages(body["messages"], has_vision=False),
                       tools=convert_tools(body.get("tools")))
    if generation_prompt:
        return ctx.chat_format_render(chat)
    return ctx.pipeline.chat_format.render(chat, add_generation_prompt=False)


def token_list(body: dict) -> list[int]:
    tokens = typed(body, "tokens", list, "", required=True)
    for index, token in enumerate(tokens):
        if isinstance(token, bool) or not isinstance(token, int):
            raise InvalidRequest(f"Invalid type for 'tokens[{index}]': expected an integer token id.",
                                 param=f"tokens[{index}]")
    return tokens


def tokenizer_namespace(ctx, request: Request) -> str:
    """The caller's cache namespace, which scopes the tokenizer cache's entries as the KV cache's."""
    return scoped_namespace(ctx.pipeline.namespace, tenant_of(request).cache_scope, None)


def max_model_len(ctx) -> Optional[int]:
    info = getattr(ctx.pipeline, "model_info", None)
    return getattr(info, "max_context", None) or ctx.config.model.max_context or None


def tokenize_route(ctx):
    @post(["/v1/tokenize", "/tokenize"], status_code=200,
          operation_class=json_body_operation(TOKENIZE_REQUEST, TOKENIZE_ANSWERS))
    async def tokenize(request: Request) -> Response:
        body = await read_json_object(request)
        model = ctx.resolve_model(typed(body, "model", str, ""))
        typed(body, "add_special_tokens", bool, "")
        want_strs = typed(body, "return_token_strs", bool, "", default=False)
        text = prompt_text(ctx, body, model)
        # a text no context could hold is refused untokenized, or after counting a context's worth
        await anyio.to_thread.run_sync(ctx.pipeline.check_prompt_chars, text)
        service = ctx.tokenizer_service
        ids = await anyio.to_thread.run_sync(service.encode, text, tokenizer_namespace(ctx, request))
        strs: Any = [service.tokenizer.id_to_token(i) for i in ids] if want_strs else None
        answer = {"count": len(ids), "max_model_len": max_model_len(ctx), "tokens": ids, "token_strs": strs}
        return Response(answer, media_type="application/json")

    return tokenize


def detokenize_route(ctx):
    @post(["/v1/detokenize", "/detokenize"], status_code=200,
          operation_class=json_body_operation(DETOKENIZE_REQUEST, DETOKENIZE_ANSWERS))
    async def detokenize(request: Request) -> Response:
        body = await read_json_object(request)
        ctx.resolve_model(typed(body, "model", str, ""))
        tokens = token_list(body)
        text = await anyio.to_thread.run_sync(ctx.tokenizer_service.decode, tokens)
        return Response({"prompt": text}, media_type="application/json")

    return detokenize

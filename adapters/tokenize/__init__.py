"""Tokenize / detokenize adapter (entry point ``tokenize``), shaped like vLLM's and SMG's.

Routes, each also without the ``/v1`` prefix:

* ``POST /v1/tokenize`` with ``{"model"?, "prompt": str}`` or ``{"model"?, "messages": [...],
  "add_generation_prompt"?: true, "tools"?: [...]}`` (Chat Completions message and tool shapes),
  optional ``"return_token_strs": bool``. ``add_special_tokens`` is accepted and ignored: the server
  never adds tokens around a text (templates write BOS themselves). Answer:
  ``{"count": n, "max_model_len": int, "tokens": [int], "token_strs": [str] | null}``.
* ``POST /v1/detokenize`` with ``{"model"?, "tokens": [int]}``; answer ``{"prompt": str}``.

Both go through the server's :class:`kvgate.core.tokenizer.service.TokenizerService`, so they use and warm
the same tokenizer cache as generation. Bad input is a 400 in OpenAI error shape.
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.http.routing import openai_error_body, protocol_router

ADAPTER_NAME = "tokenize"


def build_routes(ctx) -> list:
    from kvgate.adapters.tokenize.routes import detokenize_route, tokenize_route

    handlers = [tokenize_route(ctx), detokenize_route(ctx)]
    return [protocol_router(path="/", handlers=handlers, body=openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register(ADAPTER_NAME, build_routes)

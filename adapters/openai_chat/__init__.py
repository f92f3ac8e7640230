"""OpenAI Chat Completions adapter (entry point ``chat_completions``).

Routes, each also without the ``/v1`` prefix: ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /v1/models/{id}``. Request conversion lives in :mod:`.request` (with :mod:`.messages` and
:mod:`.tools`), rendering in :mod:`.completion` (non-streaming) and :mod:`.stream` (SSE chunks).
"""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.core.http.routing import openai_error_body, protocol_router

ADAPTER_NAME = "chat_completions"


def build_routes(ctx) -> list:
    from kvgate.adapters.openai_chat.models import model_routes
    from kvgate.adapters.openai_chat.routes import chat_route

    handlers = [chat_route(ctx), *model_routes(ctx)]
    return [protocol_router(path="/", handlers=handlers, body=openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register(ADAPTER_NAME, build_routes)

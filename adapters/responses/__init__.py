"""The OpenAI Responses API adapter: HTTP (JSON and SSE) and WebSocket on ``/v1/responses``.

Entry point ``responses = "kvgate.adapters.responses"``. Conversion lives in ``request`` /
``input_items`` / ``tools``, rendering in ``render`` / ``items`` / ``objects``, the stored-response
records in ``store``, the request driver in ``run``, the routes in ``http_routes`` and ``websocket``;
its ``[responses]`` config section is :class:`.settings.ResponsesConfig`.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.hookspecs import hookimpl
from kvgate.core.http.routing import openai_error_body, protocol_router
from kvgate.adapters.responses.http_routes import http_handlers
from kvgate.adapters.responses.settings import ResponsesConfig
from kvgate.adapters.responses.store import ResponseStore
from kvgate.adapters.responses.websocket import websocket_handler


def build_routes(ctx: Any) -> list:
    store = ResponseStore(ctx.config.path_in_state(ctx.config.section("responses").store_path, "responses"))
    handlers = http_handlers(ctx, store) + [websocket_handler(ctx, store)]
    return [protocol_router(path="/", handlers=handlers, body=openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register) -> None:
    register("responses", build_routes)


@hookimpl
def register_config_sections(register) -> None:
    register("responses", ResponsesConfig)

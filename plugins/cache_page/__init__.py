"""Plugin: the cache page -- a live view of the model, the cache tiers, recent requests and almost-hits.

- ``GET /`` redirects to ``/ui``;
- ``GET /ui`` (and its ``page.js`` / ``page.css``): plain HTML, JavaScript and CSS shipped in this
  package (no build step, nothing fetched from elsewhere). They hold no data, so they need no key;
- ``GET /v1/cache/overview?limit=N``: the page's data (:mod:`.overview`), behind the API key like
  every other data route, refused in the OpenAI error shape. The page polls it every two seconds,
  and on a 401 asks for the key, kept in the tab's session storage and sent as a Bearer token.

The recent requests it lists are kept by its own request observer (:mod:`.recent_requests`).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from litestar import Request, Response, get
from litestar.response import Redirect

from kvgate.core.errors import InvalidRequest, NotFound
from kvgate.core.hookspecs import hookimpl
from kvgate.core.http.routing import api_key_from_headers, openai_error_body, protocol_router
from kvgate.core.tenants import tenant_of
from kvgate.plugins.cache_page.overview import DEFAULT_LIMIT, MAX_LIMIT, model_facts, overview
from kvgate.plugins.cache_page.recent_requests import recent_requests_of

STATIC_FILES = {"index.html": "text/html", "page.js": "text/javascript", "page.css": "text/css"}  # + utf-8
PAGE_HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy":
                "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff"}


def static_file(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def limit_of(raw: str | None) -> int:
    """The ``limit`` query parameter: 1..MAX_LIMIT, default DEFAULT_LIMIT; anything else is a 400."""
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}.", param="limit")
    return int(raw)


def page_routes() -> list:
    files = {name: static_file(name) for name in STATIC_FILES}

    @get("/", sync_to_thread=False, include_in_schema=False)
    def root() -> Redirect:
        return Redirect(path="/ui", status_code=302)

    @get(["/ui", "/ui/"], sync_to_thread=False, include_in_schema=False)
    def page() -> Response:
        return Response(files["index.html"], media_type=STATIC_FILES["index.html"], headers=PAGE_HEADERS)

    @get("/ui/{name:str}", sync_to_thread=False, include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in files or name == "index.html":
            raise NotFound(f"No file {name!r} on the cache page.")
        return Response(files[name], media_type=STATIC_FILES[name], headers=PAGE_HEADERS)

    return [root, page, asset]


def build_routes(ctx) -> list:
    facts = model_facts(ctx)
    operators = ctx.tenant_policy.operators()

    @get("/v1/cache/overview", sync_to_thread=False)
    def cache_overview(request: Request) -> dict[str, Any]:
        presented = api_key_from_headers(request.headers)
        operator = not operators.authenticates() or operators.tenant_for(presented) is not None
        limit = limit_of(request.query_params.get("limit"))
        return overview(ctx, tenant_of(request), operator, limit, facts)

    root, *page = page_routes()
    # "/" is a bare handler: Litestar refuses a second Router at a path another Router already serves
    # (the Anthropic adapter answers HEAD / there), as both would bring an OPTIONS handler
    return [root, protocol_router("/", page, openai_error_body),
            protocol_router("/", [cache_overview], openai_error_body, api_key=ctx.api_key)]


@hookimpl
def register_adapters(register):
    register("cache_page", build_routes)


@hookimpl
def register_request_observers(register):
    register("cache_page", recent_requests_of)

"""HTTP helpers every adapter shares: body parsing, SSE responses, auth, protocol-shaped errors."""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Callable, Optional

from litestar import Request, Response, Router
from litestar.exceptions import HTTPException
from litestar.response import Stream

from kvgate.core.http.body import BodyLimits, BodyTimeout, limits_of, parse_off_loop, read_body
from kvgate.core.errors import KvgateError, Overloaded, Unauthorized
from kvgate.core.tenant_policy import TenantPolicy
from kvgate.core.tenants import STATE_KEY as TENANT_STATE_KEY

log = logging.getLogger("kvgate")

ErrorBody = Callable[[KvgateError], dict[str, Any]]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def read_json_object(request: Request, limits: Optional[BodyLimits] = None) -> dict[str, Any]:
    """The request body as a JSON object, or InvalidRequest / PayloadTooLarge naming what is wrong
    (size, depth and strings are checked by :mod:`kvgate.core.http.body`)."""
    limits = limits_of(request, limits)
    return await parse_off_loop(await read_body(request, limits), limits)


def sse_response(chunks: AsyncIterator[bytes]) -> Stream:
    return Stream(chunks, media_type="text/event-stream", headers=SSE_HEADERS)


def json_text(data: Any) -> str:
    """Compact JSON that always encodes as UTF-8 (a lone surrogate is written as its escape)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text


def sse_event(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json_text(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode("utf-8", "backslashreplace")


def api_key_from_headers(headers: Any) -> str:
    key = headers.get("x-api-key") or ""
    auth = headers.get("authorization") or ""
    if not key and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    return key


def require_api_key(policy: TenantPolicy):
    """A Litestar guard: while ``policy`` authenticates, every route it protects needs a key the
    policy accepts, as Bearer or x-api-key. It puts the key's tenant on the connection, where
    :func:`kvgate.core.tenants.tenant_of` reads it."""

    def guard(connection, _handler) -> None:
        if not policy.authenticates():
            return
        tenant = policy.tenant_for(api_key_from_headers(connection.headers))
        if tenant is None:
            raise Unauthorized("Invalid or missing API key.")
        connection.scope.setdefault("state", {})[TENANT_STATE_KEY] = tenant

    return guard


def error_response(exc: KvgateError, body: ErrorBody) -> Response:
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, BodyTimeout):  # the rest of the body is never read: end the connection
        headers["Connection"] = "close"
    return Response(body(exc), status_code=exc.status, headers=headers, media_type="application/json")


def _as_kvgate_error(exc: Exception) -> KvgateError:
    if isinstance(exc, KvgateError):
        return exc
    if isinstance(exc, HTTPException):
        error = KvgateError(str(exc.detail))
        error.status = exc.status_code
        error.kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        error.code = "not_found" if exc.status_code == 404 else "invalid_request"
        return error
    return KvgateError("Internal server error.")


def protocol_router(path: str, handlers: list, body: ErrorBody, api_key: Optional[TenantPolicy] = None,
                    **kwargs) -> Router:
    """A Router whose errors, auth failures included, are rendered in one protocol's error shape;
    with ``api_key`` (a tenant policy, usually ``ctx.api_key``) its routes are guarded by it."""

    def handle(request: Request, exc: Exception) -> Response:
        error = _as_kvgate_error(exc)
        if error.status >= 500:  # one line per server error, with the exception when it was not ours
            log.log(logging.WARNING if error is exc else logging.ERROR, "%s %s: %s %s: %s", request.method,
                    request.url.path, error.status, type(exc).__name__, exc, exc_info=None if error is exc else exc)
        return error_response(error, body)

    guards = [require_api_key(api_key)] if api_key is not None else []
    return Router(path=path, route_handlers=handlers, exception_handlers={Exception: handle}, guards=guards, **kwargs)


def openai_error_body(exc: KvgateError) -> dict[str, Any]:
    return {"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}}

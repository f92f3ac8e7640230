"""HTTP helpers every adapter shares: body parsing, SSE responses, auth, protocol-shaped errors."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

from litestar import Request, Response, Router
from litestar.exceptions import HTTPException
from litestar.response import Stream

from kvgate.core.errors import InvalidRequest, KvgateError, Overloaded, Unauthorized
from kvgate.core.keyring import Keyring
from kvgate.core.tenants import DEFAULT
from kvgate.core.tenants import STATE_KEY as TENANT_STATE_KEY

ErrorBody = Callable[[KvgateError], dict[str, Any]]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or InvalidRequest naming what is wrong."""
    raw = await request.body()
    if not raw.strip():
        raise InvalidRequest("Request body is empty; expected a JSON object.")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"Request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("Request body must be a JSON object.")
    return body


def sse_response(chunks: AsyncIterator[bytes]) -> Stream:
    return Stream(chunks, media_type="text/event-stream", headers=SSE_HEADERS)


def sse_event(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def api_key_from_headers(headers: Any) -> str:
    key = headers.get("x-api-key") or ""
    auth = headers.get("authorization") or ""
    if not key and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    return key


def require_api_key(expected: "str | Keyring"):
    """A Litestar guard: every route it protects needs a key of ``expected`` (one key, or a
    :class:`~kvgate.core.keyring.Keyring`) as Bearer or x-api-key. It puts the key's tenant on the
    connection, where :func:`kvgate.core.tenants.tenant_of` reads it."""
    keyring = expected if isinstance(expected, Keyring) else Keyring([(expected, DEFAULT)] if expected else [])

    def guard(connection, _handler) -> None:
        if not keyring:
            return
        tenant = keyring.tenant_for(api_key_from_headers(connection.headers))
        if tenant is None:
            raise Unauthorized("Invalid or missing API key.")
        connection.scope.setdefault("state", {})[TENANT_STATE_KEY] = tenant

    return guard


def error_response(exc: KvgateError, body: ErrorBody) -> Response:
    headers = {}
    if isinstance(exc, Overloaded):
        headers["Retry-After"] = str(exc.retry_after)
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


def protocol_router(path: str, handlers: list, body: ErrorBody, api_key: "str | Keyring" = "", **kwargs) -> Router:
    """A Router whose errors, auth failures included, are rendered in one protocol's error shape."""

    def handle(_request: Request, exc: Exception) -> Response:
        return error_response(_as_kvgate_error(exc), body)

    guards = [require_api_key(api_key)] if api_key else []
    return Router(path=path, route_handlers=handlers, exception_handlers={Exception: handle}, guards=guards, **kwargs)


def openai_error_body(exc: KvgateError) -> dict[str, Any]:
    return {"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}}

"""The one reader of request bodies (HTTP POST bodies and WebSocket frames): size, JSON shape and
strings are checked once here, before an adapter sees anything.

* size: over ``[server] max_body_bytes`` is :class:`PayloadTooLarge` (413), refused from the
  ``Content-Length`` header or while the body streams in, before it is all held;
* time: a body not all read within ``[server] body_read_timeout`` seconds is :class:`BodyTimeout`
  (408, and the connection is closed: the rest of the body is never read);
* shape: nesting deeper than ``max_json_depth`` or more than ``max_json_items`` items is a 400,
  measured on the bytes before parsing (:mod:`kvgate.core.http.json_shape`), so the parser never
  recurses deep or builds millions of objects;
* strings: a lone surrogate in any key or string (only a ``\\uD800``-style escape can make one) is
  a 400 naming the field, since no tokenizer, log or client can encode it; the bytes are decoded as
  strict UTF-8, so an encoded surrogate (``ED A0 80``) or any other invalid sequence is a 400 too;
* numbers: ``NaN`` and ``Infinity`` are not JSON, and an integer beyond a double's range (more than
  :data:`MAX_INTEGER_DIGITS` digits) has no meaning in any field: both are a 400 at parse time, never
  an overflow in a later conversion.

Large bodies are checked and parsed on a worker thread, so the event loop keeps serving.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import anyio
import attrs

from kvgate.core.errors import InvalidRequest, KvgateError
from kvgate.core.http.json_shape import within

THREAD_ABOVE_BYTES = 256 * 1024
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_INTEGER_DIGITS = 309  # 10**309 is past the largest double
_LONG_DIGIT_RUN = re.compile(rb"\d{%d}" % (MAX_INTEGER_DIGITS + 1))


class PayloadTooLarge(KvgateError):
    status = 413
    code = "request_too_large"
    kind = "invalid_request_error"


class BodyTimeout(KvgateError):
    """The body arrived too slowly; the response closes the connection."""

    status = 408
    code = "request_timeout"
    kind = "invalid_request_error"


@attrs.frozen
class BodyLimits:
    """What one body may be: bytes on the wire, nesting depth, items (values) in it, seconds to
    read it (0: no limit)."""

    max_bytes: int = 32 * 1024 * 1024
    max_depth: int = 128
    max_items: int = 500_000
    read_timeout: float = 0.0

    @classmethod
    def of(cls, server_config: Any) -> "BodyLimits":
        return cls(server_config.max_body_bytes, server_config.max_json_depth, server_config.max_json_items,
                   server_config.body_read_timeout)


def too_large(size: int, limits: BodyLimits) -> PayloadTooLarge:
    return PayloadTooLarge(f"Request body is {size} bytes; this server accepts at most {limits.max_bytes} bytes "
                           f"([server] max_body_bytes).")


def parse_json_object(raw: bytes, limits: BodyLimits, what: str = "Request body") -> dict[str, Any]:
    """``raw`` as a JSON object after the size, shape and string checks; InvalidRequest otherwise."""
    if len(raw) > limits.max_bytes:
        raise too_large(len(raw), limits)
    if not raw.strip():
        raise InvalidRequest(f"{what} is empty; expected a JSON object.")
    if not within(raw, limits.max_depth, limits.max_items):
        raise InvalidRequest(f"{what} nests JSON deeper than {limits.max_depth} levels or holds more than "
                             f"{limits.max_items} items; this server refuses it.", code="json_too_complex")
    try:
        text = raw.decode("utf-8-sig" if raw.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"{what} is not valid UTF-8 (byte {exc.start}: {exc.reason}).") from None
    try:
        body = _loads(text, checked_integers=bool(_LONG_DIGIT_RUN.search(raw)))
    except ValueError as exc:  # json.JSONDecodeError included
        raise InvalidRequest(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # cannot happen within max_depth; kept so it can never be a 500
        raise InvalidRequest(f"{what} nests JSON too deeply.", code="json_too_complex") from None
    if not isinstance(body, dict):
        raise InvalidRequest(f"{what} must be a JSON object.")
    if _SURROGATE_ESCAPE.search(raw):
        reject_lone_surrogates(body)
    return body


def _loads(text: str, checked_integers: bool) -> Any:
    """``json.loads`` refusing NaN / Infinity, and, when the text has a run of digits that long,
    integers past :data:`MAX_INTEGER_DIGITS` digits (checked only then: a hook slows every integer)."""
    if checked_integers:
        return json.loads(text, parse_constant=_not_json, parse_int=_bounded_integer)
    return json.loads(text, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise InvalidRequest(f"{constant} is not a JSON number; send a finite number.")


def _bounded_integer(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise InvalidRequest(f"An integer of {digits} digits is out of range (at most {MAX_INTEGER_DIGITS} digits).")
    return int(literal)


def reject_lone_surrogates(value: Any, path: str = "") -> None:
    """InvalidRequest naming the first key or string of ``value`` that holds a lone surrogate."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise InvalidRequest(f"'{where or 'body'}' contains a lone surrogate (an unpaired \\uD800-\\uDFFF "
                                     "escape), which is not valid Unicode text.", param=where or None)
        elif isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{where}.{key}" if where else str(key)
                if _SURROGATE.search(key):
                    raise InvalidRequest(f"A key in '{where or 'body'}' contains a lone surrogate.",
                                         param=where or None)
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))


async def parse_off_loop(raw: bytes, limits: BodyLimits, what: str = "Request body") -> dict[str, Any]:
    """:func:`parse_json_object`, on a worker thread when ``raw`` is large."""
    if len(raw) <= THREAD_ABOVE_BYTES:
        return parse_json_object(raw, limits, what)
    return await anyio.to_thread.run_sync(parse_json_object, raw, limits, what)


async def read_body(request: Any, limits: BodyLimits) -> bytes:
    """The raw body of ``request``, refused early (413) once it is known to exceed the limit, and
    408 once it took longer than ``limits.read_timeout``."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_bytes:
        raise too_large(int(declared), limits)
    with anyio.move_on_after(limits.read_timeout or None):
        return await _read_chunks(request, limits)
    raise BodyTimeout(f"The request body did not arrive within {limits.read_timeout:g} s "
                      "([server] body_read_timeout); the connection is closed.")


async def _read_chunks(request: Any, limits: BodyLimits) -> bytes:
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_bytes:
            raise too_large(size, limits)
        parts.append(chunk)
    return b"".join(parts)


def limits_of(request: Any, limits: Optional[BodyLimits] = None) -> BodyLimits:
    """``limits``, else the app's (``app.state.body_limits``, set by the app factory), else defaults."""
    return limits or getattr(request.app.state, "body_limits", None) or BodyLimits()

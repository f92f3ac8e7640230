"""Errors in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}, "request_id"}``.

Context overflow is a 400 ``invalid_request_error`` whose message is exactly
``prompt is too long: N tokens > M maximum``: Claude Code recognises that text and compacts.
"""

from __future__ import annotations

import uuid
from typing import Any

from kvgate.core.errors import ContextLengthExceeded, KvgateError

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 504: "timeout_error",
               529: "overloaded_error"}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_message(exc: KvgateError) -> str:
    if isinstance(exc, ContextLengthExceeded):
        return f"prompt is too long: {exc.prompt_tokens} tokens > {exc.max_context} maximum"
    return exc.message


def anthropic_error_body(exc: KvgateError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(exc.status), "message": error_message(exc)},
            "request_id": f"req_{uuid.uuid4().hex[:24]}"}

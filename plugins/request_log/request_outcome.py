"""Why a request failed, read from what the server sent: an error body, or a stream's error event.

Every protocol's error shape carries ``error.message`` (OpenAI and Anthropic bodies, the Anthropic
``error`` event, an OpenAI chat stream's ``data: {"error": ...}``, a Responses WebSocket ``error``
frame) or ``response.error`` (``response.failed``); :func:`error_reason` turns one into a line.
"""

from __future__ import annotations

import json
from typing import Any, Optional

MAX_REASON_CHARS = 300
STREAM_MARKERS = (b"event: error\n", b"event: response.failed\n", b'data: {"error":')


def _from_error(error: Any) -> Optional[str]:
    if isinstance(error, str):
        return error
    if not isinstance(error, dict):
        return None
    kind = error.get("code") or error.get("type")
    message = str(error.get("message") or "").replace("\n", " ")
    return f"{kind}: {message}" if kind else message or None


def error_reason(payload: Any) -> Optional[str]:
    """The one-line reason held by a decoded error body, event or frame; None when it holds none."""
    if not isinstance(payload, dict):
        return None
    reason = _from_error(payload.get("error"))
    if reason is None and isinstance(payload.get("response"), dict):
        reason = _from_error(payload["response"].get("error"))
    if reason is None:
        return None
    return reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "..."


def decoded(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None


def stream_error_reason(chunk: bytes) -> Optional[str]:
    """The reason of an SSE error event in ``chunk`` (one or more whole events), else None."""
    if not any(marker in chunk for marker in STREAM_MARKERS):
        return None
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: "):
            reason = error_reason(decoded(line[6:]))
            if reason:
                return reason
    return None

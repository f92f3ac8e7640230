"""The non-streaming response: the stream's own wire events folded into one ``Message``.

Building it from the same events the stream sends keeps both paths identical (Claude Code retries
a failed stream without streaming and expects the same answer).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

from kvgate.adapters.anthropic.stream import WireEvent

_DELTA_FIELDS = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
                 "signature_delta": ("signature", "signature")}


def fold_message(events: Iterable[WireEvent]) -> Optional[dict[str, Any]]:
    """The Message the events describe; None if they end in an ``error`` event."""
    message: dict[str, Any] = {}
    json_parts: dict[int, list[str]] = {}
    for name, data in events:
        if name == "message_start":
            message = json.loads(json.dumps(data["message"]))
        elif name == "content_block_start":
            message["content"].append(dict(data["content_block"]))
        elif name == "content_block_delta":
            _apply_delta(message["content"], data["index"], data["delta"], json_parts)
        elif name == "content_block_stop" and data["index"] in json_parts:
            message["content"][data["index"]]["input"] = json.loads("".join(json_parts.pop(data["index"])))
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"].update(data["usage"])
            if "kvgate" in data:
                message["kvgate"] = data["kvgate"]
        elif name == "error":
            return None
    return message


def _apply_delta(content: list, index: int, delta: dict[str, Any], json_parts: dict[int, list[str]]) -> None:
    if delta["type"] == "input_json_delta":
        json_parts.setdefault(index, []).append(delta["partial_json"])
        return
    field, key = _DELTA_FIELDS[delta["type"]]
    content[index][field] = content[index].get(field, "") + delta[key]

"""Responses wire objects: the ``Response`` envelope, output items and usage.

Usage always carries both detail objects with integers (Codex fails to parse ``response.completed``
when a details object lacks its inner key)::

    {"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens"},
     "output_tokens", "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Optional

from kvgate.core.types import TokenLogprob, Usage


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": int(usage.prompt_tokens),
        "input_tokens_details": {"cached_tokens": int(usage.cached_tokens), "cache_write_tokens": 0},
        "output_tokens": int(usage.completion_tokens),
        "output_tokens_details": {"reasoning_tokens": int(usage.reasoning_tokens)},
        "total_tokens": int(usage.total_tokens),
    }


def response_envelope(response_id: str, body: dict[str, Any], created_at: Optional[int] = None) -> dict[str, Any]:
    """A ``Response`` with ``status:"in_progress"`` and no output, echoing the request's fields."""
    text = body.get("text") if isinstance(body.get("text"), dict) else {"format": {"type": "text"}}
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()),
        "status": "in_progress", "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model") or "", "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None,
        "store": body.get("store") is not False, "temperature": body.get("temperature"), "text": text,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") if isinstance(body.get("tools"), list) else [],
        "top_p": body.get("top_p"), "top_logprobs": body.get("top_logprobs"),
        "truncation": body.get("truncation") or "disabled",
        "usage": None, "user": body.get("user"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
    }


def message_item(item_id: str, text: Optional[str], status: str,
                 logprobs: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """A message item; ``text=None`` gives the empty shell sent in ``output_item.added``."""
    content = [] if text is None else [output_text_part(text, logprobs)]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def output_text_part(text: str, logprobs: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """``logprobs`` (empty unless asked for): ``[{"token", "logprob", "bytes", "top_logprobs":
    [{"token", "logprob", "bytes"}, ...]}, ...]``, one per token of ``text``."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def logprob_objects(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [{"token": token.token, "logprob": token.logprob, "bytes": list(token.bytes),
             "top_logprobs": [{"token": top.token, "logprob": top.logprob, "bytes": list(top.bytes)}
                              for top in token.top_logprobs]} for token in tokens]


def reasoning_item(item_id: str, text: Optional[str], status: str,
                   encrypted: Optional[str] = None) -> dict[str, Any]:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content,
            "encrypted_content": encrypted, "status": status}


def function_call_item(item_id: str, call_id: str, name: str, namespace: Optional[str],
                       arguments: str, status: str) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}
    if namespace:
        item["namespace"] = namespace
    return item


def error_object(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}

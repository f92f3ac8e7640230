"""Responses wire objects: the ``Response`` envelope, output items and usage.

Usage always carries both detail objects with integers (Codex fails to parse ``response.completed``
when a details object lacks its inner key)::

    {"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens"},
     "output_tokens", "output_tokens_details": {"reasoning_tokens"}, "total_tokens",
     "kvgate": {"cached_tokens_device", "cached_tokens_ssd", "replayed_tokens"}}

``kvgate`` says where the cached input tokens came from (``cached_tokens`` is their sum) and how many
tokens a hybrid model ran again to cut its recurrent state at the hit's length, as Chat Completions does.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Optional

from kvgate.core.types import SamplingParams, TokenLogprob, Usage

SERVICE_TIER = "default"  # one processing tier: every request is served the same way


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": int(usage.prompt_tokens),
        "input_tokens_details": {"cached_tokens": int(usage.cached_tokens), "cache_write_tokens": 0},
        "output_tokens": int(usage.completion_tokens),
        "output_tokens_details": {"reasoning_tokens": int(usage.reasoning_tokens)},
        "total_tokens": int(usage.total_tokens),
        "kvgate": {"cached_tokens_device": int(usage.cached_tokens_device),
                   "cached_tokens_ssd": int(usage.cached_tokens_ssd), "replayed_tokens": int(usage.replayed_tokens)},
    }


def response_envelope(response_id: str, body: dict[str, Any], applied: Optional[SamplingParams] = None,
                      created_at: Optional[int] = None) -> dict[str, Any]:
    """A ``Response`` with ``status:"in_progress"`` and no output, echoing the request's fields;
    the sampling fields are the ``applied`` values (the server's defaults where the request gave none)."""
    applied = applied or SamplingParams()
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()),
        "completed_at": None, "status": "in_progress", "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"), "model": body.get("model") or "", "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") if isinstance(body.get("reasoning"), dict) else None,
        "store": body.get("store") is not False, "background": False, "service_tier": SERVICE_TIER,
        "temperature": applied.temperature, "top_p": applied.top_p, "top_logprobs": applied.top_logprobs,
        "presence_penalty": applied.presence_penalty, "frequency_penalty": applied.frequency_penalty,
        "text": text_echo(body.get("text")), "tool_choice": body.get("tool_choice") or "auto",
        "tools": [tool_echo(tool) for tool in body.get("tools") or [] if isinstance(tool, dict)],
        "truncation": body.get("truncation") or "disabled",
        "usage": None, "user": body.get("user"), "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"), "prompt_cache_retention": body.get("prompt_cache_retention"),
        "context_management": body.get("context_management"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), dict) else {},
    }


def tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as given; a function tool also carries ``description``, ``parameters`` and ``strict``
    (null where the request left them out), as the response's ``FunctionTool`` requires."""
    if tool.get("type") != "function":
        return tool
    return {"description": None, "parameters": None, "strict": None, **tool}


def text_echo(text: Any) -> dict[str, Any]:
    """``text`` as given (``{"format": {"type": "text"}}`` by default); a ``json_schema`` format
    keeps its ``description`` (null when absent) and reports ``strict`` as a boolean."""
    if not isinstance(text, dict):
        return {"format": {"type": "text"}}
    fmt = text.get("format")
    if not isinstance(fmt, dict):
        return {**text, "format": {"type": "text"}}
    if fmt.get("type") == "json_schema":
        fmt = {"description": None, **fmt, "strict": fmt.get("strict") is True}
    return {**text, "format": fmt}


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
    """``encrypted_content`` only when asked for: the item's schema allows it absent, not null."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    item = {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def function_call_item(item_id: str, call_id: str, name: str, namespace: Optional[str],
                       arguments: str, status: str) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}
    if namespace:
        item["namespace"] = namespace
    return item


def custom_tool_call_item(item_id: str, call_id: str, name: str, namespace: Optional[str],
                          text: str, status: str) -> dict[str, Any]:
    item = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": name, "input": text,
            "status": status}
    if namespace:
        item["namespace"] = namespace
    return item


def error_object(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "message": message}

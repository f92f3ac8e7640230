"""Canonical events -> Anthropic stream events, in the order clients check.

Wire order::

    message_start                            usage's input side as final (after the cache lookup)
    (ping)                                   once early, then on every Heartbeat
    content_block_start {index: i}           i = 0, 1, 2, ... one block open at a time
      content_block_delta*                   text_delta | thinking_delta (+ one signature_delta
                                             before a thinking block's stop) | input_json_delta
    content_block_stop {index: i}
    message_delta {stop_reason, stop_sequence, usage{output_tokens, input_tokens, cache_*, kvgate}}
    message_stop

The final usage (``message_delta``'s, so the non-streaming message's) carries ``kvgate:
{cached_tokens_device, cached_tokens_ssd, replayed_tokens}``: where the cache-read tokens came from,
and the tokens a hybrid model ran again to cut its recurrent state at the hit's length.
``message_start``'s has none: it is sent before the cut, when the replayed count is not known yet.

``input_json_delta`` fragments are forwarded while they remain a prefix of one JSON object; at
the call's end the rest is sent, so the fragments always concatenate to the JSON of ``input``.
A ``Finished(reason="error")`` becomes an ``error`` event instead of ``message_delta``. The stop
reason is ``tool_use`` whenever the message holds complete tool calls and no truncated one. A
reply the loop guard ended is ``end_turn`` with ``kvgate: {"guard_stop": true}`` on ``message_delta``
(not ``max_tokens``: Claude Code would ask to continue a loop).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from kvgate.adapters.anthropic.jsonprefix import JsonObjectPrefix
from kvgate.core.types import (
    Finished, Heartbeat, ReasoningDelta, Started, TextDelta, ToolCallArgsDelta, ToolCallEnd,
    ToolCallStart, Usage)

WireEvent = tuple[str, dict[str, Any]]
THINKING_SIGNATURE = "kvgate-local"  # there is no real signature; clients drop unsigned thinking
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "stop_sequence": "stop_sequence", "cancelled": "end_turn"}


def usage_fields(usage: Usage) -> dict[str, Any]:
    """Anthropic usage: input_tokens excludes the tokens read from the prefix cache and those
    written to it as ``cache_control`` prefixes (``cache_creation``, by TTL, when there are any)."""
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    written = min(sum(usage.cache_written.values()), usage.prompt_tokens - cached)
    fields = {"input_tokens": usage.prompt_tokens - cached - written, "output_tokens": usage.completion_tokens,
              "cache_creation_input_tokens": written, "cache_read_input_tokens": cached}
    if written:
        fields["cache_creation"] = {f"ephemeral_{ttl}_input_tokens": usage.cache_written.get(ttl, 0)
                                    for ttl in ("5m", "1h")}
    return fields


def final_usage_fields(usage: Usage) -> dict[str, Any]:
    """``message_delta``'s usage: :func:`usage_fields` and kvgate's split of the cached tokens."""
    return {**usage_fields(usage), "kvgate": {"cached_tokens_device": usage.cached_tokens_device,
                                              "cached_tokens_ssd": usage.cached_tokens_ssd,
                                              "replayed_tokens": usage.replayed_tokens}}


def message_shell(message_id: str, model: str, started: Started) -> dict[str, Any]:
    """``message_start``'s message: its usage's input side is the final one (Claude Code checks)."""
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage_fields(started.usage)}


def error_event(kind: str, message: str) -> WireEvent:
    return "error", {"type": "error", "error": {"type": kind, "message": message}}


class _ToolBlock:
    def __init__(self, call_index: int) -> None:
        self.call_index = call_index
        self.prefix = JsonObjectPrefix()
        self.sent = ""
        self.held = ""  # leading whitespace: a whitespace-only fragment makes the SDK's parser fail
        self.complete = False


class MessageStream:
    """Feed canonical events in order; each call returns the wire events they produce."""

    def __init__(self, message_id: str, model: str) -> None:
        self.message_id, self.model = message_id, model
        self.index = -1
        self.open: Optional[str] = None  # "text" | "thinking" | "tool_use"
        self.tool: Optional[_ToolBlock] = None
        self.completed_calls = 0
        self.started = self.finished = False

    def feed(self, event: Any) -> list[WireEvent]:
        if self.finished:
            return []
        handler = {Started: self._started, Heartbeat: self._ping, TextDelta: self._text,
                   ReasoningDelta: self._thinking, ToolCallStart: self._tool_start,
                   ToolCallArgsDelta: self._tool_args, ToolCallEnd: self._tool_end,
                   Finished: self._finished}.get(type(event))
        out = [] if self.started or isinstance(event, Started) else self._started(Started(0))
        return out + (handler(event) if handler else [])

    # -- message ------------------------------------------------------------------------------
    def _started(self, event: Started) -> list[WireEvent]:
        if self.started:
            return []
        self.started = True
        shell = message_shell(self.message_id, self.model, event)
        return [("message_start", {"type": "message_start", "message": shell}), *self._ping(event)]

    def _ping(self, _event: Any) -> list[WireEvent]:
        return [("ping", {"type": "ping"})]

    def _finished(self, event: Finished) -> list[WireEvent]:
        truncated_call = self.open == "tool_use" and self.tool is not None and not self.tool.complete
        out = self._close()
        self.finished = True
        if event.reason == "error":
            return out + [error_event("api_error", "Generation failed on the server.")]
        reason = STOP_REASONS.get(event.reason, "end_turn")
        if self.completed_calls and not truncated_call and reason in ("end_turn", "max_tokens"):
            reason = "tool_use"  # complete calls are there to be run, even if output went on after them
        delta = {"stop_reason": reason, "stop_sequence": event.stop_sequence if reason == "stop_sequence" else None}
        data = {"type": "message_delta", "delta": delta, "usage": final_usage_fields(event.usage)}
        if event.relaxed:  # kvgate's extension: schema keywords the fence did not enforce
            data["kvgate"] = {"relaxed_schema": list(event.relaxed)}
        if event.guard_stop:  # kvgate's extension: the loop guard, not the model, ended the turn
            data.setdefault("kvgate", {})["guard_stop"] = True
        out.append(("message_delta", data))
        return out + [("message_stop", {"type": "message_stop"})]

    # -- blocks -------------------------------------------------------------------------------
    def _open(self, kind: str, block: dict[str, Any]) -> list[WireEvent]:
        out = self._close()
        self.index += 1
        self.open = kind
        return out + [("content_block_start", {"type": "content_block_start", "index": self.index,
                                               "content_block": block})]

    def _close(self) -> list[WireEvent]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": THINKING_SIGNATURE}))
        if self.open == "tool_use" and self.tool is not None and not self.tool.complete:
            out.extend(self._json(self.tool.prefix.closing()))
        self.open, self.tool = None, None
        return out + [("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _delta(self, delta: dict[str, Any]) -> WireEvent:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _text(self, event: TextDelta) -> list[WireEvent]:
        if not event.text:
            return []
        out = [] if self.open == "text" else self._open("text", {"type": "text", "text": ""})
        return out + [self._delta({"type": "text_delta", "text": event.text})]

    def _thinking(self, event: ReasoningDelta) -> list[WireEvent]:
        if not event.text:
            return []
        out = [] if self.open == "thinking" else self._open(
            "thinking", {"type": "thinking", "thinking": "", "signature": ""})
        return out + [self._delta({"type": "thinking_delta", "thinking": event.text})]

    # -- tool calls ---------------------------------------------------------------------------
    def _tool_start(self, event: ToolCallStart) -> list[WireEvent]:
        name = f"{event.namespace}__{event.name}" if event.namespace else event.name
        out = self._open("tool_use", {"type": "tool_use", "id": f"toolu_{event.id}", "name": name, "input": {}})
        self.tool = _ToolBlock(event.index)
        return out

    def _tool_args(self, event: ToolCallArgsDelta) -> list[WireEvent]:
        tool = self.tool
        if tool is None or tool.call_index != event.index or tool.prefix.blocked:
            return []
        tool.held += event.text[:tool.prefix.feed(event.text)]
        if tool.prefix.state == "start":
            return []
        text, tool.held = tool.held, ""
        return self._json(text)

    def _tool_end(self, event: ToolCallEnd) -> list[WireEvent]:
        tool = self.tool
        if tool is None or tool.call_index != event.index:
            return []
        rest = remaining_arguments(tool.sent, event.arguments)
        out = [] if rest is None else self._json(rest)
        tool.complete = rest is not None
        self.completed_calls += 1
        return out + self._close()

    def _json(self, text: str) -> list[WireEvent]:
        if not text or self.tool is None:
            return []
        self.tool.sent += text
        return [self._delta({"type": "input_json_delta", "partial_json": text})]


def remaining_arguments(sent: str, arguments: str) -> Optional[str]:
    """What completes ``sent`` into the call's input JSON, or None when only closing() can."""
    parsed = parse_object(arguments)
    if parsed is not None and arguments.startswith(sent):
        return arguments[len(sent):]
    if not sent:
        return json.dumps(parsed if parsed is not None else {}, ensure_ascii=False)
    return None


def parse_object(text: str) -> Optional[dict[str, Any]]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None

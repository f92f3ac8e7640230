"""Canonical events -> the non-streaming ``chat.completion`` object.

With ``logprobs: true``, ``choices[0].logprobs`` is ``{"content": [{"token", "logprob", "bytes",
"top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...], "refusal": null}``: every token whose
text went to ``message.content``, in order (reasoning and tool-call tokens have none).
A call of a custom tool is ``{id, type: "custom", custom: {name, input}}``.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import attrs

from kvgate.adapters.openai_chat.messages import CALL_PREFIX
from kvgate.adapters.openai_chat.render import (
    ResponseMeta, extension, finish_reason, log_issue, logprobs_object, merge_issues, usage_object, wire_tool_name,
)
from kvgate.adapters.custom_tools import input_of
from kvgate.core.types import (
    Event, Finished, ParseIssue, ReasoningDelta, TextDelta, TokenLogprob, ToolCallArgsDelta, ToolCallEnd,
    ToolCallStart,
)


@attrs.define
class CollectedCall:
    id: str
    name: str
    arguments: str = ""
    final: Optional[str] = None
    custom: bool = False


@attrs.define
class Collected:
    """Everything one generation produced, gathered from its events."""

    meta: ResponseMeta
    text: list[str] = attrs.field(factory=list)
    logprobs: list[TokenLogprob] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    calls: dict[int, CollectedCall] = attrs.field(factory=dict)
    issues: list[ParseIssue] = attrs.field(factory=list)
    finished: Optional[Finished] = None

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
            self.logprobs.extend(event.logprobs)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            name = wire_tool_name(event.name, event.namespace)
            self.calls[event.index] = CollectedCall(CALL_PREFIX + event.id, name,
                                                    custom=name in self.meta.custom_tools)
        elif isinstance(event, ToolCallArgsDelta) and event.index in self.calls:
            self.calls[event.index].arguments += event.text
        elif isinstance(event, ToolCallEnd) and event.index in self.calls:
            self.calls[event.index].final = event.arguments
        elif isinstance(event, ParseIssue):
            log_issue(self.meta, event)
            self.issues.append(event)
        elif isinstance(event, Finished):
            self.finished = event


def collect(meta: ResponseMeta, events: Iterable[Event]) -> Collected:
    collected = Collected(meta)
    for event in events:
        collected.add(event)
    return collected


def completion_object(collected: Collected) -> dict[str, Any]:
    """The ``chat.completion`` body; ``collected.finished`` must be set."""
    meta, finished = collected.meta, collected.finished
    assert finished is not None, "the event stream ended without Finished"
    calls = [tool_call_object(collected.calls[i]) for i in sorted(collected.calls)]
    text = "".join(collected.text)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None,
                               "refusal": None}
    if collected.reasoning:
        message["reasoning_content"] = "".join(collected.reasoning)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs_object(meta, collected.logprobs),
                     "finish_reason": finish_reason(finished.reason, bool(calls), meta.named_tool_choice)}],
        "usage": usage_object(finished.usage),
        "kvgate": extension(finished, merge_issues(collected.issues, finished)),
    }


def tool_call_object(call: CollectedCall) -> dict[str, Any]:
    arguments = call.final if call.final is not None else call.arguments
    if call.custom:
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": input_of(arguments)}}
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}

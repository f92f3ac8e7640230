"""The sub-events of one streamed output item (without sequence numbers; the renderer stamps them).

message:       output_item.added, content_part.added{output_text}, output_text.delta...,
               output_text.done, content_part.done, output_item.done
               (each delta's ``logprobs`` are its tokens'; the done events carry them all)
reasoning:     output_item.added, content_part.added{reasoning_text}, reasoning_text.delta...,
               reasoning_text.done, content_part.done, output_item.done
function_call: output_item.added, function_call_arguments.delta..., function_call_arguments.done,
               output_item.done
custom_tool_call: output_item.added, custom_tool_call_input.delta..., custom_tool_call_input.done,
               output_item.done (the deltas are the decoded input text, not the model's JSON)
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.adapters.responses import objects
from kvgate.adapters.responses.input_items import encode_reasoning
from kvgate.core.types import TokenLogprob


@attrs.define
class OpenItem:
    kind: str  # "message" | "reasoning" | "function_call" | "custom_tool_call"
    id: str
    output_index: int = 0
    text: str = ""  # message text, reasoning text, call arguments or custom call input so far
    call_id: str = ""
    name: str = ""
    namespace: Optional[str] = None
    logprobs: list[dict[str, Any]] = attrs.field(factory=list)  # a message's, as on the wire
    arguments: str = ""  # a custom call's arguments as the model wrote them (for the history)

    @property
    def is_call(self) -> bool:
        return self.kind in ("function_call", "custom_tool_call")


def item_object(item: OpenItem, status: str, final: bool, encrypted_reasoning: bool = False) -> dict[str, Any]:
    """The item as ``output_item.added`` (``final=False``) or ``output_item.done`` shows it."""
    if item.kind == "message":
        return objects.message_item(item.id, item.text if final else None, status, item.logprobs)
    if item.kind == "reasoning":
        encrypted = encode_reasoning(item.text) if final and encrypted_reasoning else None
        return objects.reasoning_item(item.id, item.text if final else None, status, encrypted)
    if item.kind == "custom_tool_call":
        return objects.custom_tool_call_item(item.id, item.call_id, item.name, item.namespace,
                                             item.text if final else "", status)
    return objects.function_call_item(item.id, item.call_id, item.name, item.namespace,
                                      item.text if final else "", status)


def _part(item: OpenItem, text: str) -> dict[str, Any]:
    if item.kind == "message":
        return objects.output_text_part(text, item.logprobs)
    return {"type": "reasoning_text", "text": text}


def _where(item: OpenItem, with_content: bool = True) -> dict[str, Any]:
    where = {"item_id": item.id, "output_index": item.output_index}
    if with_content and not item.is_call:
        where["content_index"] = 0
    return where


def open_events(item: OpenItem) -> list[dict[str, Any]]:
    events = [{"type": "response.output_item.added", "output_index": item.output_index,
               "item": item_object(item, "in_progress", final=False)}]
    if not item.is_call:
        events.append({"type": "response.content_part.added", **_where(item), "part": _part(item, "")})
    return events


def delta_event(item: OpenItem, text: str, logprobs: Optional[list[TokenLogprob]] = None) -> dict[str, Any]:
    item.text += text
    if item.kind == "message":
        wire = objects.logprob_objects(logprobs or [])
        item.logprobs += wire
        return {"type": "response.output_text.delta", **_where(item), "delta": text, "logprobs": wire}
    if item.kind == "reasoning":
        return {"type": "response.reasoning_text.delta", **_where(item), "delta": text}
    if item.kind == "custom_tool_call":
        return {"type": "response.custom_tool_call_input.delta", **_where(item), "delta": text}
    return {"type": "response.function_call_arguments.delta", **_where(item), "delta": text}


def close_events(item: OpenItem, status: str, encrypted_reasoning: bool) -> list[dict[str, Any]]:
    done = {"type": "response.output_item.done", "output_index": item.output_index,
            "item": item_object(item, status, final=True, encrypted_reasoning=encrypted_reasoning)}
    if item.kind == "function_call":
        return [{"type": "response.function_call_arguments.done", **_where(item), "name": item.name,
                 "arguments": item.text}, done]
    if item.kind == "custom_tool_call":
        return [{"type": "response.custom_tool_call_input.done", **_where(item), "input": item.text}, done]
    text_done = {"type": "response.output_text.done", **_where(item), "text": item.text, "logprobs": item.logprobs}
    if item.kind == "reasoning":
        text_done = {"type": "response.reasoning_text.done", **_where(item), "text": item.text}
    return [text_done, {"type": "response.content_part.done", **_where(item), "part": _part(item, item.text)}, done]

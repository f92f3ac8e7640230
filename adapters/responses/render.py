"""Canonical events -> Responses stream events (the same dicts go out as SSE data and WS frames).

Order (protocols.md 2.7): ``response.created``, ``response.in_progress``, then one output item at a
time, each ``output_item.added`` -> its sub-events -> ``output_item.done``, then exactly one of
``response.completed`` / ``response.incomplete`` / ``response.failed``. Every event carries
``sequence_number`` from 0; item ids, call ids and names are identical in added, done and the
final ``response.output``. Reasoning is its own ``reasoning`` item (raw ``reasoning_text`` content,
``summary: []``); text is a ``message`` with one ``output_text`` part; calls are ``function_call``.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Optional

from kvgate.core.types import Finished, Message, ReasoningDelta, TextDelta, ToolCall, ToolCallArgsDelta
from kvgate.core.types import ToolCallEnd, ToolCallStart, Usage
from kvgate.adapters.responses import objects
from kvgate.adapters.responses.items import OpenItem, close_events, delta_event, open_events

TERMINAL = {"stop": "completed", "tool_calls": "completed", "stop_sequence": "completed",
            "length": "incomplete", "cancelled": "failed", "error": "failed"}


class StreamRenderer:
    """Feeds canonical events, returns wire events; ``response`` is the final object at the end."""

    def __init__(self, envelope: dict[str, Any], encrypted_reasoning: bool = False):
        self.response = envelope
        self.encrypted_reasoning = encrypted_reasoning
        self.sequence = 0
        self.current: Optional[OpenItem] = None
        self.calls: dict[int, OpenItem] = {}
        self.assistant = Message(role="assistant")
        self.finished = False

    def _stamp(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for event in events:
            event["sequence_number"] = self.sequence
            self.sequence += 1
        return events

    def _lifecycle(self, kind: str) -> dict[str, Any]:
        return {"type": kind, "response": copy.deepcopy(self.response)}

    def start(self, in_progress: bool = True) -> list[dict[str, Any]]:
        kinds = ["response.created", "response.in_progress"] if in_progress else ["response.created"]
        return self._stamp([self._lifecycle(kind) for kind in kinds])

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        item, self.current = self.current, None
        if item is None:
            return []
        events = close_events(item, status, self.encrypted_reasoning)
        self.response["output"].append(events[-1]["item"])
        self._remember(item)
        return events

    def _remember(self, item: OpenItem) -> None:
        if item.kind == "message":
            self.assistant.content += item.text
        elif item.kind == "reasoning":
            self.assistant.reasoning = (self.assistant.reasoning or "") + item.text
        else:
            self.assistant.tool_calls.append(ToolCall(id=item.call_id, name=item.name, arguments=item.text,
                                                      namespace=item.namespace))

    def _open(self, item: OpenItem) -> list[dict[str, Any]]:
        events = self._close()
        item.output_index = len(self.response["output"])
        self.current = item
        return events + open_events(item)

    def feed(self, event: Any) -> list[dict[str, Any]]:
        if self.finished:
            return []
        events: list[dict[str, Any]] = []
        if isinstance(event, (TextDelta, ReasoningDelta)) and event.text:
            kind = "message" if isinstance(event, TextDelta) else "reasoning"
            if self.current is None or self.current.kind != kind:
                events += self._open(OpenItem(kind=kind, id=objects.new_id("msg" if kind == "message" else "rs")))
            events.append(delta_event(self.current, event.text, event.logprobs if kind == "message" else None))
        elif isinstance(event, ToolCallStart):
            item = OpenItem(kind="function_call", id=objects.new_id("fc"), call_id=f"call_{event.id}",
                            name=event.name, namespace=event.namespace)
            self.calls[event.index] = item
            events += self._open(item)
        elif isinstance(event, ToolCallArgsDelta) and self.current is self.calls.get(event.index) and event.text:
            events.append(delta_event(self.current, event.text))
        elif isinstance(event, ToolCallEnd) and self.current is self.calls.get(event.index):
            self.current.text = event.arguments
            events += self._close()
        elif isinstance(event, Finished):
            return self.finish(event)
        return self._stamp(events)

    def finish(self, finished: Finished) -> list[dict[str, Any]]:
        status = TERMINAL.get(finished.reason, "failed")
        events = self._close("completed" if status == "completed" else "incomplete")
        if status == "completed" and not self.response["output"]:
            self.current = OpenItem(kind="message", id=objects.new_id("msg"), output_index=0)
            events += open_events(self.current) + self._close()
        self.response["usage"] = objects.usage_object(finished.usage)
        if finished.relaxed:  # kvgate's extension: schema keywords the fence did not enforce
            self.response["kvgate"] = {"relaxed_schema": list(finished.relaxed)}
        if status == "incomplete":
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        if status == "failed":
            self.response["error"] = objects.error_object("server_error", f"generation ended: {finished.reason}")
        return self._stamp(events) + self._terminal(status)

    def fail(self, code: str, message: str, usage: Optional[Usage] = None) -> list[dict[str, Any]]:
        """End the stream with ``response.failed`` (e.g. ``context_length_exceeded``)."""
        if self.finished:
            return []
        events = self._close("incomplete")
        self.response["error"] = objects.error_object(code, message)
        self.response["usage"] = objects.usage_object(usage or Usage())
        return self._stamp(events) + self._terminal("failed")

    def complete_empty(self, usage: Usage) -> list[dict[str, Any]]:
        """``response.completed`` with no output: the reply to a ``generate: false`` warm-up."""
        self.response["usage"] = objects.usage_object(usage)
        return self._terminal("completed")

    def _terminal(self, status: str) -> list[dict[str, Any]]:
        self.finished = True
        self.response["status"] = status
        if status == "completed":
            self.response["completed_at"] = int(time.time())
        return self._stamp([self._lifecycle(f"response.{status}")])

"""Canonical events -> Responses stream events (the same dicts go out as SSE data and WS frames).

Order (protocols.md 2.7): ``response.created``, ``response.in_progress``, then one output item at a
time, each ``output_item.added`` -> its sub-events -> ``output_item.done``, then exactly one of
``response.completed`` / ``response.incomplete`` / ``response.failed``. Every event carries
``sequence_number`` from 0; item ids, call ids and names are identical in added, done and the
final ``response.output``. Reasoning is its own ``reasoning`` item (raw ``reasoning_text`` content,
``summary: []``); text is a ``message`` with one ``output_text`` part; calls are ``function_call``,
or ``custom_tool_call`` when they call one of ``tools``' custom tools (their input decoded from the
model's ``{"input": ...}`` as it streams).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Optional

from kvgate.adapters.custom_tools import InputDecoder, custom_tool_of, input_arguments, input_of
from kvgate.core.types import Finished, Message, ReasoningDelta, TextDelta, Tool, ToolCall, ToolCallArgsDelta
from kvgate.core.types import ToolCallEnd, ToolCallStart, Usage
from kvgate.adapters.responses import objects
from kvgate.adapters.responses.items import OpenItem, close_events, delta_event, open_events

TERMINAL = {"stop": "completed", "tool_calls": "completed", "stop_sequence": "completed",
            "length": "incomplete", "cancelled": "failed", "error": "failed"}


class StreamRenderer:
    """Feeds canonical events, returns wire events; ``response`` is the final object at the end."""

    def __init__(self, envelope: dict[str, Any], encrypted_reasoning: bool = False,
                 tools: Optional[list[Tool]] = None):
        self.response = envelope
        self.tools = list(tools or [])
        self.decoders: dict[int, InputDecoder] = {}  # custom calls' input, by call index
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
            arguments = (item.arguments or input_arguments(item.text)) if item.kind == "custom_tool_call" \
                else item.text
            self.assistant.tool_calls.append(ToolCall(id=item.call_id, name=item.name, arguments=arguments,
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
            events += self._open(self._call_item(event))
        elif isinstance(event, ToolCallArgsDelta) and self.current is self.calls.get(event.index) and event.text:
            decoder = self.decoders.get(event.index)
            text = decoder.feed(event.text) if decoder is not None else event.text
            events += [delta_event(self.current, text)] if text else []
        elif isinstance(event, ToolCallEnd) and self.current is self.calls.get(event.index):
            events += self._end_call(event)
        elif isinstance(event, Finished):
            return self.finish(event)
        return self._stamp(events)

    def _call_item(self, event: ToolCallStart) -> OpenItem:
        custom = custom_tool_of(self.tools, event.name, event.namespace) is not None
        item = OpenItem(kind="custom_tool_call" if custom else "function_call",
                        id=objects.new_id("ctc" if custom else "fc"), call_id=f"call_{event.id}",
                        name=event.name, namespace=event.namespace)
        if custom:
            self.decoders[event.index] = InputDecoder()
        self.calls[event.index] = item
        return item

    def _end_call(self, event: ToolCallEnd) -> list[dict[str, Any]]:
        decoder = self.decoders.get(event.index)
        if decoder is None:
            self.current.text = event.arguments
            return self._close()
        rest = decoder.finish(event.arguments)
        events = [delta_event(self.current, rest)] if rest else []
        self.current.text, self.current.arguments = input_of(event.arguments), event.arguments
        return events + self._close()

    def finish(self, finished: Finished) -> list[dict[str, Any]]:
        status = TERMINAL.get(finished.reason, "failed")
        events = self._close("completed" if status == "completed" else "incomplete")
        if status == "completed" and not self.response["output"]:
            self.current = OpenItem(kind="message", id=objects.new_id("msg"), output_index=0)
            events += open_events(self.current) + self._close()
        self.response["usage"] = objects.usage_object(finished.usage)
        if finished.relaxed:  # kvgate's extension: schema keywords the fence did not enforce
            self.response["kvgate"] = {"relaxed_schema": list(finished.relaxed)}
        if finished.guard_stop:  # kvgate's extension: the loop guard, not the model, ended the reply
            self.response.setdefault("kvgate", {})["guard_stop"] = True
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

    def item_added(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """``output_item.added`` of an item written whole later (a compaction, before its summary)."""
        return self._stamp([{"type": "response.output_item.added", "output_index": len(self.response["output"]),
                             "item": item}])

    def item_done(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """``output_item.done`` of the item :meth:`item_added` opened, now in ``output``."""
        self.response["output"].append(item)
        return self._stamp([{"type": "response.output_item.done", "output_index": len(self.response["output"]) - 1,
                             "item": item}])

    def still_working(self, event: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
        """A progress event while nothing else is sent: ``event``, else ``response.in_progress`` again."""
        return self._stamp([event if event is not None else self._lifecycle("response.in_progress")])

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

"""Canonical events -> Chat Completions SSE frames (``data:`` lines only, ended by ``[DONE]``).

Sequence (every chunk repeats the same ``id``, ``object``, ``created`` and ``model``)::

    {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}   on Started
    : keep-alive                                                                          on Heartbeat
    {"choices":[{"index":0,"delta":{"reasoning_content":"..."},"finish_reason":null}]}
    {"choices":[{"index":0,"delta":{"content":"..."},"finish_reason":null}]}
    {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_..","type":"function",
                                                    "function":{"name":"f","arguments":""}}]},...}]}
    {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{..."}}]},...}]}
    {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}], "kvgate":{...}?}
    {"choices":[],"usage":{...}}                              only with stream_options.include_usage
    [DONE]

``role`` is sent once; a tool call's ``id``/``type``/``name`` only in its first fragment. If a
``ToolCallEnd`` carries more argument text than was streamed, the rest is sent before finishing.
A custom tool's call streams ``{"index", "id", "type": "custom", "custom": {"name", "input": ""}}``
then ``{"index", "custom": {"input": "..."}}`` fragments of its decoded input text.
Errors after the headers are ``data: {"error": {...}}`` followed by ``[DONE]``.

``logprobs`` is null on every chunk unless the request asked for them; then each ``content`` chunk
carries ``{"content": [token, ...], "refusal": null}`` (shape as in :mod:`.completion`): the tokens
whose first character of content is in that delta. Content is text after the detokenizer, the
stop strings and the tool-call parser, so a token comes out with the delta that releases its text
(a token held back as a possible tag comes with a later chunk), a token split between content and
a tag comes once, with its content, and tokens of reasoning, tool calls and stop strings have
none (OpenAI's rule: message content only; vLLM reports every token). Concatenated, the
chunks' tokens are the non-streaming ``logprobs.content``.
"""

from __future__ import annotations

from typing import Any

from kvgate.adapters.openai_chat.messages import CALL_PREFIX
from kvgate.adapters.openai_chat.render import (
    ResponseMeta, extension, finish_reason, generation_failed_message, log, log_issue, logprobs_object,
    merge_issues, usage_object, wire_tool_name,
)
from kvgate.adapters.custom_tools import InputDecoder
from kvgate.core.errors import KvgateError
from kvgate.core.http.routing import openai_error_body, sse_event
from kvgate.core.types import (
    Event, Finished, Heartbeat, ParseIssue, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd,
    ToolCallStart,
)

KEEP_ALIVE = b": keep-alive\n\n"
DONE = sse_event("[DONE]")


class ChunkRenderer:
    """Turns one request's events into SSE frames; holds the per-stream counters."""

    def __init__(self, meta: ResponseMeta):
        self.meta = meta
        self.role_sent = False
        self.streamed_args: dict[int, str] = {}
        self.decoders: dict[int, InputDecoder] = {}  # custom calls' input, by call index
        self.issues: list[ParseIssue] = []

    def chunk(self, delta: dict[str, Any], finish: str | None = None,
              logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"id": self.meta.id, "object": "chat.completion.chunk", "created": self.meta.created,
                "model": self.meta.model, "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    def render(self, event: Event) -> list[bytes]:
        if isinstance(event, Heartbeat):
            return [KEEP_ALIVE]
        frames = self._role_frame() if not self.role_sent else []
        if isinstance(event, TextDelta) and event.text:
            logprobs = logprobs_object(self.meta, event.logprobs)
            frames.append(sse_event(self.chunk({"content": event.text}, logprobs=logprobs)))
        elif isinstance(event, ReasoningDelta) and event.text:
            frames.append(sse_event(self.chunk({"reasoning_content": event.text})))
        elif isinstance(event, (ToolCallStart, ToolCallArgsDelta, ToolCallEnd)):
            frames.extend(self._tool_frames(event))
        elif isinstance(event, ParseIssue):
            log_issue(self.meta, event)
            self.issues.append(event)
        elif isinstance(event, Finished):
            frames.extend(self._finish_frames(event))
        return frames

    def _role_frame(self) -> list[bytes]:
        self.role_sent = True
        return [sse_event(self.chunk({"role": "assistant", "content": ""}))]

    def _tool_frames(self, event: Event) -> list[bytes]:
        if isinstance(event, ToolCallStart) and wire_tool_name(event.name, event.namespace) in self.meta.custom_tools:
            self.streamed_args[event.index], self.decoders[event.index] = "", InputDecoder()
            fragment = {"index": event.index, "id": CALL_PREFIX + event.id, "type": "custom",
                        "custom": {"name": wire_tool_name(event.name, event.namespace), "input": ""}}
            return [sse_event(self.chunk({"tool_calls": [fragment]}))]
        if isinstance(event, ToolCallStart):
            self.streamed_args[event.index] = ""
            fragment = {"index": event.index, "id": CALL_PREFIX + event.id, "type": "function",
                        "function": {"name": wire_tool_name(event.name, event.namespace), "arguments": ""}}
            return [sse_event(self.chunk({"tool_calls": [fragment]}))]
        if event.index not in self.streamed_args:
            log.warning("%s: tool-call event for unknown index %d dropped", self.meta.id, event.index)
            return []
        if event.index in self.decoders:
            return self._custom_frames(event)
        sent = self.streamed_args[event.index]
        text = event.text if isinstance(event, ToolCallArgsDelta) else self._unsent_tail(event.index, event.arguments)
        if not text:
            return []
        self.streamed_args[event.index] = sent + text
        return [sse_event(self.chunk({"tool_calls": [{"index": event.index, "function": {"arguments": text}}]}))]

    def _custom_frames(self, event: Event) -> list[bytes]:
        decoder = self.decoders[event.index]
        text = decoder.feed(event.text) if isinstance(event, ToolCallArgsDelta) else decoder.finish(event.arguments)
        if not text:
            return []
        return [sse_event(self.chunk({"tool_calls": [{"index": event.index, "custom": {"input": text}}]}))]

    def _finish_frames(self, finished: Finished) -> list[bytes]:
        if finished.reason == "error":
            error = KvgateError(generation_failed_message(merge_issues(self.issues, finished)))
            return self.error_frames(error)
        reason = finish_reason(finished.reason, bool(self.streamed_args), self.meta.named_tool_choice)
        last = self.chunk({}, reason)
        issues = merge_issues(self.issues, finished)
        if issues or finished.guard_interventions or finished.relaxed:
            last["kvgate"] = extension(finished, issues)
        frames = [sse_event(last)]
        if self.meta.include_usage:
            frames.append(sse_event({"id": self.meta.id, "object": "chat.completion.chunk",
                                     "created": self.meta.created, "model": self.meta.model,
                                     "choices": [], "usage": usage_object(finished.usage)}))
        return frames + [DONE]

    def _unsent_tail(self, index: int, final: str) -> str:
        """The part of the final arguments not streamed yet ('' when the stream already diverged)."""
        sent = self.streamed_args[index]
        if final.startswith(sent):
            return final[len(sent):]
        log.warning("%s: tool call %d final arguments differ from the streamed ones", self.meta.id, index)
        return ""

    def error_frames(self, error: KvgateError) -> list[bytes]:
        return [sse_event(openai_error_body(error)), DONE]

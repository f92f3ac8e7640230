"""Shared parser base for dialects that write one tag per argument (GLM XML, DeepSeek DSML).

Subclasses read the call and parameter headers; this base owns reasoning, the argument value
streaming (string values stream as escaped JSON chunks, typed values are decided at their closing
tag), duplicate detection, skipping of malformed calls and the report of unclosed ones.
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.dialect import CallIdFactory
from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import ArgsBuilder, ToolIndex, is_string_schema, param_schema, quote, typed_value
from kvgate.dialects._stream import StateParser

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class TagCallParser(StateParser):
    value_close = ""
    value_closes: tuple[str, ...] = ()  # more spellings of the value's end (lenient reading)
    skip_until = ""

    def __init__(self, tools: list[Tool], call_id: CallIdFactory, start_in: str = "content"):
        self.index_of_tools = ToolIndex(tools)
        self.call_id = call_id
        self.start_in = start_in
        self.index = 0
        self.call_open = False
        self.raw = ""
        super().__init__()

    def start_state(self):
        return {"content": self.content, "reasoning": self.reasoning_text,
                "after_reasoning": self.after_think}[self.start_in]

    def content(self) -> bool:
        raise NotImplementedError

    def after_think(self) -> bool:
        raise NotImplementedError

    def reasoning_text(self) -> bool:
        head, tag = self.scan([THINK_CLOSE])
        self.reasoning(head)
        if tag is not None:
            return self.goto(self.after_think)
        return bool(head)

    # ---- calls

    def begin_call(self, written: str, next_state) -> bool:
        known, tool = self.index_of_tools.resolve(written)
        if not written or not known:
            return self.malformed(f"unknown tool {written!r}" if written else "tool call without a name")
        name, namespace = (tool.name, tool.namespace) if tool else (written, None)
        self.tool, self.args, self.call_open = tool, ArgsBuilder(), True
        self.emit(ToolCallStart(self.index, self.call_id(self.index, written), name, namespace))
        return self.goto(next_state)

    def _delta(self, text: str) -> None:
        if text:
            self.emit(ToolCallArgsDelta(self.index, text))

    def begin_value(self, key: str, is_string: Optional[bool], after) -> bool:
        """Start one argument value; ``is_string`` None lets the tool schema decide."""
        self.after_value = after
        if key in self.args.keys:
            self.issue(f"duplicate parameter {key!r}", self.raw)
            self.value_mode, self.value_raw = "skip", ""
            return self.goto(self.value_text)
        schema = param_schema(self.tool, key) if is_string is None else None
        string = is_string_schema(schema) if is_string is None else is_string
        self.value_strict = is_string is False
        self.value_mode, self.value_schema = ("string" if string else "typed"), schema
        self.value_raw = self.value_sent = ""
        self._delta(self.args.open(key) + (self.args.add('"') if string else ""))
        return self.goto(self.value_text)

    def value_text(self) -> bool:
        head, tag = self.scan([self.value_close, *self.value_closes])
        self.raw += head + (tag or "")
        self.value_raw += head
        if self.value_mode == "string":
            self._emit_string(self.value_raw if tag is not None else self.decided(self.value_raw))
        if tag is None:
            return bool(head)
        self.close_value()
        return self.goto(self.after_value)

    def _emit_string(self, upto: str) -> None:
        chunk, self.value_sent = upto[len(self.value_sent):], upto
        if chunk:
            self._delta(self.args.add(quote(self.unescape(chunk))))

    def decided(self, raw: str) -> str:
        """The prefix of a string value that no later text can change (escape hold-back)."""
        return raw

    def unescape(self, text: str) -> str:
        return text

    def close_value(self) -> None:
        if self.value_mode == "string":
            self._emit_string(self.value_raw)
            self._delta(self.args.add('"'))
        elif self.value_mode == "typed":
            value = typed_value(self.value_raw, self.value_schema)
            if self.value_strict and value != self.value_raw:
                self.issue("parameter value is not valid JSON", self.raw)
            self._delta(self.args.add(value))
        self.value_mode = "none"

    def after_call(self):
        """The state that follows a finished (or skipped) call."""
        return self.content

    def end_call(self) -> bool:
        self._delta(self.args.close())
        self.emit(ToolCallEnd(self.index, self.args.text))
        self.index, self.call_open, self.raw = self.index + 1, False, ""
        return self.goto(self.after_call())

    # ---- malformed and unclosed calls

    def malformed(self, message: str) -> bool:
        self.problem = message
        return self.goto(self.skip_call)

    def skip_call(self) -> bool:
        head, tag = self.scan([self.skip_until])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        self.issue(self.problem, self.raw)
        if self.call_open:
            return self.end_call()
        self.raw = ""
        return self.goto(self.after_call())

    def at_end(self) -> None:
        if self.call_open:
            self.raw += self.buf
            self.issue("unclosed tool call", self.raw)
            if getattr(self, "value_mode", "none") != "none":
                self.close_value()
            self.end_call()
            self._run()

"""Shared parser base for dialects that write one tag per argument (GLM XML, DeepSeek DSML,
Qwen3-Coder XML).

Subclasses read the call and parameter headers; this base owns reasoning, the argument value
streaming (string values stream as escaped JSON chunks, typed values are decided at their closing
tag), typing by the tool's schema and the variants it reads (:mod:`kvgate.dialects._typing`),
duplicate detection, skipping of malformed calls and the report of unclosed ones.

A call completes at its closing tag. One that cannot (malformed after its start, or unclosed at the
end of output) ends without ``ToolCallEnd`` (the protocol in :class:`kvgate.core.dialect.StreamParser`).
Variant read: a tool with declared parameters called with one undeclared parameter named
``arguments`` or ``input`` whose value is a JSON object: that object is the arguments (the
parameter's key is held back until the next tag says whether it stands alone).
"""

from __future__ import annotations

from typing import Any, Optional

from kvgate.core.dialect import CallIdFactory
from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import (
    ArgsBuilder, ToolIndex, is_json_string, is_string_schema, param_schema, quote, typed_value,
)
from kvgate.dialects._typing import admits_no_string, escaped_json_value, flagged_string_value, json_object, reads_as
from kvgate.dialects._stream import NEED_MORE, StateParser

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
WRAPPER_KEYS = ("arguments", "input")


class TagCallParser(StateParser):
    value_close = ""
    value_closes: tuple[str, ...] = ()  # more spellings of the value's end (lenient reading)
    value_interrupts: dict[str, str] = {}  # a tag that ends a value left unclosed -> what it is
    skip_until = ""

    def __init__(self, tools: list[Tool], call_id: CallIdFactory, start_in: str = "content"):
        self.index_of_tools = ToolIndex(tools)
        self.call_id = call_id
        self.start_in = start_in
        self.index = 0
        self.call_open = False
        self.raw = ""
        self.value_mode = "none"
        self.held: Optional[tuple[str, str, Optional[str], str]] = None  # a wrapper parameter, held back
        super().__init__()

    def expect_any(self, options: list[tuple[str, Any]]) -> object:
        """The state paired with the first literal of ``options`` (literal, state) the buffer opens
        with (consumed, and kept in ``raw``); NEED_MORE while that is undecided; None for none."""
        for literal, state in options:
            before = self.buf
            got = self.expect(literal)
            if got is NEED_MORE:
                return NEED_MORE
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                return state
        return None

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
        self.tool, self.args, self.call_open, self.held = tool, ArgsBuilder(), True, None
        self.emit(ToolCallStart(self.index, self.call_id(self.index, written), name, namespace))
        return self.goto(next_state)

    def _delta(self, text: str) -> None:
        if text:
            self.emit(ToolCallArgsDelta(self.index, text))

    def begin_value(self, key: str, is_string: Optional[bool], after) -> bool:
        """Start one argument value; ``is_string`` is the wire's flag (DSML), None lets the schema decide."""
        self.after_value, self.value_key = after, key
        self._release_held()
        if key in self.args.keys:
            self.issue(f"duplicate parameter {key!r}", self.raw)
            self.value_mode, self.value_raw = "skip", ""
            return self.goto(self.value_text)
        schema = param_schema(self.tool, key)
        string = is_string_schema(schema) if is_string is None else is_string and not admits_no_string(schema)
        self.value_flag, self.value_schema = is_string, schema
        self.value_raw = self.value_sent = ""
        if self._wrapper(key, schema):
            self.value_mode, self.held_key = "held", key
            return self.goto(self.value_text)
        self.value_mode = "string" if string else "typed"
        self._delta(self.args.open(key) + (self.args.add('"') if string else ""))
        return self.goto(self.value_text)

    def _wrapper(self, key: str, schema) -> bool:
        declared = (self.tool.parameters.get("properties") or {}) if self.tool else {}
        return key in WRAPPER_KEYS and schema is None and bool(declared) and not self.args.keys

    def value_text(self) -> bool:
        head, tag = self.scan([self.value_close, *self.value_closes, *self.value_interrupts])
        interrupted = tag in self.value_interrupts
        if interrupted:
            self.buf = tag + self.buf  # the next state reads the tag again
        self.raw += head + (tag if tag is not None and not interrupted else "")
        self.value_raw += head
        if self.value_mode == "string":
            self._emit_string(self.value_raw if tag is not None else self.decided(self.value_raw))
        if tag is None:
            return bool(head)
        self.close_value()
        if interrupted:
            self.issue(f"parameter {self.value_key!r} was not closed before {self.value_interrupts[tag]}", self.raw)
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
        elif self.value_mode in ("typed", "held"):
            value, variant = self.typed_text()
            if self.value_mode == "held":
                self.held = (self.held_key, value, variant, self.value_raw.strip())
            else:
                self._add_value(value, variant)
        self.value_mode = "none"

    def _add_value(self, value: str, variant: Optional[str]) -> None:
        if variant:
            self.issue(variant, self.raw)
        self._delta(self.args.add(value))

    def typed_text(self) -> tuple[str, Optional[str]]:
        """The JSON text of the value just closed, and the variant read to get it (or None)."""
        raw, schema, flag = self.value_raw, self.value_schema, self.value_flag
        if flag is True:
            text = flagged_string_value(raw, schema)
            if text is not None:
                return text, "a value flagged as a string read as the parameter's type"
            return '"' + quote(raw) + '"', None
        text = escaped_json_value(raw, schema)
        if text is not None:
            return text, "a value written with escaped quotes read as the parameter's JSON"
        if flag is False and is_string_schema(schema) and reads_as(raw) and not is_json_string(raw):
            return '"' + quote(raw) + '"', "a value flagged as JSON read as a string, the parameter's type"
        value = typed_value(raw, schema if flag is None else None)
        return value, ("parameter value is not valid JSON" if flag is False and value != raw else None)

    def _release_held(self) -> None:
        """A held wrapper parameter turned out to be one argument among others: send it as one."""
        if self.held is not None:
            key, value, variant, _ = self.held
            self.held = None
            self._delta(self.args.open(key))
            self._add_value(value, variant)

    def after_call(self):
        """The state that follows a finished (or skipped) call."""
        return self.content

    def end_call(self) -> bool:
        if self.held is not None and json_object(self.held[3]):
            key, whole = self.held[0], self.held[3]
            self.held = None
            self.issue(f"arguments wrapped in a parameter named {key!r} read as the arguments", self.raw)
            self._delta(self.args.whole(whole))
        self._release_held()
        self._delta(self.args.close())
        self.emit(ToolCallEnd(self.index, self.args.text))
        self.index, self.call_open, self.raw = self.index + 1, False, ""
        return self.goto(self.after_call())

    def fail_call(self) -> None:
        """A started call that cannot complete ends without ToolCallEnd; the next takes the next index."""
        self.index, self.call_open, self.held, self.value_mode = self.index + 1, False, None, "none"

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
            self.fail_call()
        self.raw = ""
        return self.goto(self.after_call())

    def at_end(self) -> None:
        if self.call_open:
            self.raw += self.buf
            self.issue("unclosed tool call", self.raw)
            self.fail_call()

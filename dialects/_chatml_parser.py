"""Incremental parser of ChatML JSON output (see :mod:`kvgate.dialects.chatml_json` for the format)."""

from __future__ import annotations

import json

from kvgate.core.dialect import CallIdFactory
from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import ToolIndex
from kvgate.dialects._stream import NEED_MORE, StateParser

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
JSON_OUTSIDE_STRING = set("{}[],:0123456789-+.eE \t\r\ntruefalsn")


class ChatmlParser(StateParser):
    tool_states = ("call_head", "call_expect", "call_name", "call_args", "json_args", "string_args",
                   "call_tail", "call_close", "skip_call")

    def __init__(self, tools: list[Tool], call_id: CallIdFactory, start_in: str = "content"):
        self.index_of_tools = ToolIndex(tools)
        self.call_id = call_id
        self.start_in = start_in
        self.index = 0
        super().__init__()

    def start_state(self):
        return {"content": self.plain_text, "reasoning": self.reasoning_text,
                "after_reasoning": self.think_close}[self.start_in]

    # ---- text and reasoning

    def plain_text(self) -> bool:
        head, tag = self.scan(["\n" + CALL_OPEN, CALL_OPEN, THINK_OPEN])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.think_open)
        if tag is not None:
            self.raw, self.name, self.args, self.unknown = tag, None, "", None
            return self.goto(self.call_head)
        return bool(head)

    def think_open(self) -> bool:
        got = self.optional("\n")
        return got is not NEED_MORE and self.goto(self.reasoning_text)

    def reasoning_text(self) -> bool:
        head, tag = self.scan(["\n" + THINK_CLOSE, THINK_CLOSE])
        self.reasoning(head)
        if tag is not None:
            return self.goto(self.think_close)
        return bool(head)

    def think_close(self) -> bool:
        got = self.optional("\n\n")
        if got is NEED_MORE:
            return False
        if got is False and self.optional("\n") is NEED_MORE:
            return False
        return self.goto(self.plain_text)

    # ---- one call: <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>

    def expect_then(self, literals: list[str], next_state) -> bool:
        self.pending, self.after = list(literals), next_state
        return self.goto(self.call_expect)

    def call_expect(self) -> bool:
        while self.pending:
            before = self.buf
            got = self.expect(self.pending[0])
            if got is NEED_MORE:
                return False
            self.raw += before[: len(before) - len(self.buf)]
            if got is False:
                return self.malformed(f"expected {self.pending[0]!r} in a tool call")
            self.pending.pop(0)
        return self.goto(self.after)

    def call_head(self) -> bool:
        return self.expect_then(["{", '"name"', ":"], self.call_name)

    def call_name(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped:
            return self.final and self.malformed("tool call without a name")
        if not stripped.startswith('"'):
            return self.malformed("tool name is not a JSON string")
        try:
            name, end = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            if self.final or CALL_CLOSE in stripped:
                return self.malformed("unterminated tool name")
            return False
        self.raw += self.take(len(self.buf) - len(stripped) + end)
        return self.start_call(name)

    def start_call(self, written: str) -> bool:
        known, tool = self.index_of_tools.resolve(written)
        if not known:
            self.unknown = written
            return self.goto(self.skip_call)
        name, namespace = (tool.name, tool.namespace) if tool else (written, None)
        self.name = written
        self.emit(ToolCallStart(self.index, self.call_id(self.index, written), name, namespace))
        return self.expect_then([",", '"arguments"', ":"], self.call_args)

    def call_args(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped:
            return self.final and self.malformed("tool call without arguments")
        self.raw += self.take(len(self.buf) - len(stripped))
        if stripped[0] in "{[":
            self.depth, self.in_string, self.escaped = 0, False, False
            return self.goto(self.json_args)
        if stripped[0] == '"':
            return self.goto(self.string_args)
        return self.malformed("arguments are not a JSON object")

    def json_args(self) -> bool:
        taken = 0
        for char in self.buf:
            if not self._json_char(char):
                self._args_delta(self.take(taken))
                return self.malformed("invalid character in arguments")
            taken += 1
            if self.depth == 0:
                self._args_delta(self.take(taken))
                return self.goto(self.call_tail)
        self._args_delta(self.take(taken))
        if self.final:
            return self.malformed("unclosed arguments")
        return False

    def _json_char(self, char: str) -> bool:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == '"':
                self.in_string = False
            return True
        if char == '"':
            self.in_string = True
        elif char in "{[":
            self.depth += 1
        elif char in "}]":
            self.depth -= 1
        return char in JSON_OUTSIDE_STRING or char == '"'

    def _args_delta(self, text: str) -> None:
        if text:
            self.raw += text
            self.args += text
            self.emit(ToolCallArgsDelta(self.index, text))

    def string_args(self) -> bool:
        try:
            value, end = json.JSONDecoder().raw_decode(self.buf)
        except ValueError:
            if self.final or CALL_CLOSE in self.buf:
                return self.malformed("unterminated arguments string")
            return False
        self.raw += self.take(end)
        self.args = ""
        self._args_delta(value)
        return self.goto(self.call_tail)

    def call_tail(self) -> bool:
        return self.expect_then(["}"], self.call_close)

    def call_close(self) -> bool:
        before = self.buf
        got = self.expect(CALL_CLOSE)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        if got is False and not (self.final and not self.buf.strip()):
            return self.malformed("expected '</tool_call>' after the arguments")
        self.buf = "" if got is False else self.buf
        return self.end_call()

    def end_call(self) -> bool:
        try:
            json.loads(self.args)
        except ValueError:
            self.issue("tool call arguments are not valid JSON", self.raw)
        self.emit(ToolCallEnd(self.index, self.args))
        self.index += 1
        return self.goto(self.plain_text)

    # ---- malformed blocks are reported, never dropped silently

    def malformed(self, message: str) -> bool:
        self.problem = message
        return self.goto(self.skip_call)

    def skip_call(self) -> bool:
        head, tag = self.scan([CALL_CLOSE])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        if self.unknown is not None:
            self.issue(f"unknown tool {self.unknown!r}", self.raw)
        else:
            self.issue(self.problem, self.raw)
            if self.name is not None:
                self.emit(ToolCallEnd(self.index, self.args))
                self.index += 1
        return self.goto(self.plain_text)

"""The incremental parser of Gemma 4 output (the wire format is in :mod:`kvgate.dialects.gemma4.dialect`).

Text runs until ``<|tool_call>``; a call is ``call:NAME{`` + its arguments + ``}<tool_call|>``, read
whole at its close (``<tool_call|>`` inside a ``<|"|>`` string is text). ``<|channel>thought\\n`` ...
``<channel|>`` is reasoning; ``<|tool_response>`` (how the model hands its calls over) is syntax.
An unknown tool, a body that is not argument syntax, or a call left open give a ParseIssue and no
``ToolCallEnd``; a duplicate key gives one and the first value is kept.
"""

from __future__ import annotations

from kvgate.core.dialect import CallIdFactory
from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import ToolIndex
from kvgate.dialects._stream import NEED_MORE, StateParser
from kvgate.dialects.gemma4.values import QUOTE, WireError, parse_arguments

CALL_OPEN, CALL_CLOSE, CALL_PREFIX = "<|tool_call>", "<tool_call|>", "call:"
RESPONSE_OPEN, RESPONSE_CLOSE = "<|tool_response>", "<tool_response|>"
CHANNEL_OPEN, CHANNEL_CLOSE, THOUGHT = "<|channel>", "<channel|>", "thought\n"


class Gemma4Parser(StateParser):
    tool_states = ("call_prefix", "call_name", "call_body", "call_string", "skip_call")

    def __init__(self, tools: list[Tool], call_id: CallIdFactory, start_in: str = "content"):
        self.tools, self.call_id, self.start_in = ToolIndex(tools), call_id, start_in
        self.index, self.call_open, self.raw, self.body, self.problem = 0, False, "", "", ""
        super().__init__()

    def start_state(self):
        return self.reasoning_text if self.start_in == "reasoning" else self.content

    def content(self) -> bool:
        head, tag = self.scan([CALL_OPEN, CHANNEL_OPEN, RESPONSE_OPEN])
        self.text(head)
        if tag == CALL_OPEN:
            self.raw = tag
            return self.goto(self.call_prefix)
        if tag == CHANNEL_OPEN:
            return self.goto(self.channel_name)
        return tag is not None or bool(head)

    def channel_name(self) -> bool:
        return self.optional(THOUGHT) is not NEED_MORE and self.goto(self.reasoning_text)

    def reasoning_text(self) -> bool:
        head, tag = self.scan([CHANNEL_CLOSE])
        self.reasoning(head)
        return self.goto(self.content) if tag is not None else bool(head)

    # ---- calls

    def call_prefix(self) -> bool:
        got = self.optional(CALL_PREFIX)
        if got is NEED_MORE:
            return False
        if got is False:
            return self.malformed(f"expected {CALL_PREFIX!r} after {CALL_OPEN}")
        self.raw += CALL_PREFIX
        return self.goto(self.call_name)

    def call_name(self) -> bool:
        brace, close = self.buf.find("{"), self.buf.find(CALL_CLOSE)
        if close >= 0 and (brace < 0 or close < brace):
            return self.malformed("tool call without arguments")
        if brace < 0:
            return False
        name = self.take(brace)
        self.raw += name + self.take(1)
        known, tool = self.tools.resolve(name)
        if not name or not known:
            return self.malformed(f"unknown tool {name!r}" if name else "tool call without a name")
        self.emit(ToolCallStart(self.index, self.call_id(self.index, name), tool.name if tool else name,
                                tool.namespace if tool else None))
        self.call_open, self.body = True, ""
        return self.goto(self.call_body)

    def call_body(self) -> bool:
        head, tag = self.scan([QUOTE, CALL_CLOSE])
        self.body += head + (tag if tag == QUOTE else "")
        self.raw += head + (tag or "")
        if tag == QUOTE:
            return self.goto(self.call_string)
        return self.end_call() if tag is not None else bool(head)

    def call_string(self) -> bool:
        head, tag = self.scan([QUOTE])
        self.body += head + (tag or "")
        self.raw += head + (tag or "")
        return self.goto(self.call_body) if tag is not None else bool(head)

    def end_call(self) -> bool:
        try:
            if not self.body.endswith("}"):
                raise WireError("the arguments do not end with '}'")
            arguments, duplicates = parse_arguments(self.body[:-1])
        except WireError as exc:
            self.issue(f"malformed tool call: {exc}", self.raw)
            return self.close_call(None)
        for key in duplicates:
            self.issue(f"duplicate parameter {key!r}", self.raw)
        return self.close_call(arguments)

    def close_call(self, arguments) -> bool:
        if arguments is not None:
            self.emit(ToolCallArgsDelta(self.index, arguments))
            self.emit(ToolCallEnd(self.index, arguments))
        self.index += 1 if self.call_open else 0
        self.call_open, self.raw, self.body = False, "", ""
        return self.goto(self.content)

    def malformed(self, problem: str) -> bool:
        self.problem = problem
        return self.goto(self.skip_call)

    def skip_call(self) -> bool:
        head, tag = self.scan([CALL_CLOSE])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        self.issue(self.problem, self.raw)
        return self.close_call(None)

    def at_end(self) -> None:
        if self.raw:
            self.issue("unclosed tool call", self.raw + self.buf)
            self.close_call(None)

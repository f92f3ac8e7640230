"""Shared parser base for dialects that write a block of calls, each a name and a JSON object
between marker tokens (DeepSeek V3.1 / R1, Kimi K2).

A subclass supplies the steps that read a call's head (``head_steps``: each consumes one decided
piece or waits) and the literals that end the arguments (``args_end``). This base owns content,
reasoning, the block, argument streaming (the JSON text as it arrives), the JSON check at the end
of a call, skipping of malformed calls and the report of unclosed ones. A call whose arguments are
not one JSON object ends without ``ToolCallEnd`` (the protocol in
:class:`kvgate.core.dialect.StreamParser`); at the end of output a call whose arguments are already
a complete object is completed (its end marker missing is reported).
"""

from __future__ import annotations

from typing import Callable, Optional

from kvgate.core.types import Tool, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import ToolIndex
from kvgate.dialects._stream import NEED_MORE, StateParser
from kvgate.dialects._typing import json_object

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
MAX_HEAD = 512  # a call head longer than this without its end marker is malformed


class JsonCallParser(StateParser):
    tool_states = ("block_body", "block_noise", "call_head", "call_args", "skip_call", "skip_block")

    def __init__(self, tools: list[Tool], call_id, start_in: str, *, block_open: str, block_close: str,
                 call_open: str, call_close: str, eos: str = ""):
        self.index_of_tools, self.call_id, self.start_in = ToolIndex(tools), call_id, start_in
        self.block_open, self.block_close = block_open, block_close
        self.call_open, self.call_close, self.eos = call_open, call_close, eos
        self.index, self.raw, self.in_block, self.call_open_now = 0, "", False, False
        super().__init__()

    def start_state(self):
        return {"content": self.content, "reasoning": self.reasoning_text,
                "after_reasoning": self.content}[self.start_in]

    # ---- subclass hooks

    def head_steps(self) -> list[Callable[[], object]]:
        """Readers of one call's head, each returning True (done), NEED_MORE or a problem string;
        the last one calls :meth:`begin_call`."""
        raise NotImplementedError

    def args_end(self) -> list[str]:
        return [self.call_close]

    # ---- text, reasoning, the block

    def content(self) -> bool:
        ends = [self.block_open, THINK_OPEN, THINK_CLOSE] + ([self.eos] if self.eos else [])
        head, tag = self.scan(ends)
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.reasoning_text)
        if tag == self.block_open:
            self.in_block, self.raw = True, tag
            return self.goto(self.block_body)
        return bool(head) or tag is not None

    def reasoning_text(self) -> bool:
        head, tag = self.scan([THINK_CLOSE])
        self.reasoning(head)
        if tag is not None:
            return self.goto(self.content)
        return bool(head)

    def block_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        for text, state in ((self.call_open, self.call_head), (self.block_close, self.content)):
            got = self.consume([text])
            if got is NEED_MORE:
                return False
            if got is True:
                if state == self.content:
                    self.in_block, self.raw = False, ""
                else:
                    self.raw, self.steps = self.call_open, self.head_steps()
                return self.goto(state)
        return self.goto(self.block_noise)

    def block_noise(self) -> bool:
        """Text between the block's markers that belongs to no call: skipped and reported; the
        block goes on at the next call or the block's end."""
        head, tag = self.scan([self.call_open, self.block_close])
        self.raw += head
        if tag is None:
            if self.final:
                self.problem = f"expected {self.call_open} or {self.block_close} in the tool calls block"
                return self.goto(self.skip_block)
            return bool(head)
        self.buf = tag + self.buf  # block_body reads the marker again
        self.issue("text outside any call in the tool calls block ignored", self.raw)
        self.raw = ""
        return self.goto(self.block_body)

    # ---- one call

    def call_head(self) -> bool:
        while self.steps:
            got = self.steps[0]()
            if got is NEED_MORE:
                if self.final:
                    self.raw += self.take(len(self.buf))
                    return self.malformed("unclosed tool call")
                return False
            if got is not True:
                return self.malformed(str(got))
            self.steps.pop(0)
        return True

    def begin_call(self, written: str) -> object:
        known, tool = self.index_of_tools.resolve(written)
        if not written or not known:
            return f"unknown tool {written!r}" if written else "tool call without a name"
        name, namespace = (tool.name, tool.namespace) if tool else (written, None)
        self.args, self.call_open_now = "", True
        self.emit(ToolCallStart(self.index, self.call_id(self.index, written), name, namespace))
        self.goto(self.call_args)
        return True

    def call_args(self) -> bool:
        head, tag = self.scan(self.args_end())
        self.raw += head + (tag or "")
        if head:
            self.args += head
            self.emit(ToolCallArgsDelta(self.index, head))
        if tag is None:
            return bool(head)
        return self.end_call()

    def end_call(self) -> bool:
        if json_object(self.args):
            self.emit(ToolCallEnd(self.index, self.args))
        else:
            self.issue("tool call arguments are not a JSON object", self.raw)
        self.index, self.call_open_now, self.raw = self.index + 1, False, ""
        return self.goto(self.block_body)

    # ---- readers for head steps

    def consume(self, literals: list[str]) -> object:
        """All of ``literals`` in order (whitespace before each is lenient): True/False/NEED_MORE;
        nothing is consumed unless all match."""
        buf = self.buf
        for text in literals:
            stripped = buf.lstrip(" \t\r\n")
            if stripped.startswith(text):
                buf = stripped[len(text):]
                continue
            return NEED_MORE if text.startswith(stripped) and not self.final else False
        self.raw += self.buf[: len(self.buf) - len(buf)]
        self.buf = buf
        return True

    def upto(self, end: str) -> Optional[str]:
        """The text before ``end`` (``end`` consumed too), or None while it has not arrived."""
        pos = self.buf.find(end)
        if pos < 0:
            return None
        text = self.take(pos)
        self.raw += text + self.take(len(end))
        return text

    def too_long(self) -> bool:
        return len(self.buf) > MAX_HEAD

    # ---- malformed and unclosed calls

    def malformed(self, message: str) -> bool:
        self.problem = message
        return self.goto(self.skip_call)

    def skip_call(self) -> bool:
        head, tag = self.scan([self.call_close, self.block_close])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        self.issue(self.problem, self.raw)
        if self.call_open_now:  # started: it ends without ToolCallEnd
            self.index, self.call_open_now = self.index + 1, False
        self.raw = ""
        if tag == self.block_close:
            self.in_block = False
            return self.goto(self.content)
        return self.goto(self.block_body)

    def at_end(self) -> None:
        if self.call_open_now:
            self.raw += self.buf
            complete = json_object(self.args)
            self.issue("tool call ended without its end marker" if complete else "unclosed tool call", self.raw)
            if complete:
                self.emit(ToolCallEnd(self.index, self.args))
            self.index, self.call_open_now = self.index + 1, False
        elif self.in_block:
            self.issue(f"unclosed {self.block_open} block", self.raw)

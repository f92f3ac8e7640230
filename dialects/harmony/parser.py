"""Harmony output, read incrementally into reasoning, answer text and tool calls.

The completion starts right after ``<|start|>assistant`` (the generation prompt), at a message
header. Each message is ``HEADER + '<|message|>' + BODY`` ended by ``<|end|>`` (then
``<|start|>assistant`` and the next header) or by a stop token (``<|call|>``, ``<|return|>``),
which the engine never hands over: the end of output ends the message. HEADER is
``[' to=' R]'<|channel|>' CHANNEL [' to=' R][' ' ['<|constrain|>'] TYPE]``.

* channel ``analysis`` -> ReasoningDelta; ``final``, or ``commentary`` with no recipient (a
  preamble) -> TextDelta;
* recipient ``functions.NAME`` -> a tool call whose arguments are BODY (streamed as they arrive;
  ToolCallEnd when BODY is one JSON object).

The recipient may stand before or after the channel (both are harmony). openai-harmony writes it
before the channel in the history; a call written with it after the channel gets an id ending in
``-ch``, so that the history (clients send ids back) writes it where the model did. Read and reported (the history renders the canonical spelling):
a call on another channel or with a content type other than ``<|constrain|>json``, a call ended by
``<|end|>``. Not read (reported,
skipped): an unknown tool or recipient, an unreadable header, a message interrupted by
``<|start|>``.
"""

from __future__ import annotations

import re
from typing import Optional

from kvgate.core.types import ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects._args import ToolIndex
from kvgate.dialects._stream import StateParser
from kvgate.dialects._typing import json_object

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
CALL, RETURN, CONSTRAIN = "<|call|>", "<|return|>", "<|constrain|>"
ASSISTANT = START + "assistant"
AFTER_CHANNEL = "-ch"  # ends the id of a call whose recipient the model wrote after the channel
CALL_TYPE = " " + CONSTRAIN + "json"
BODY_ENDS = [END, CALL, RETURN, START]
MAX_HEADER = 512
HEADER = re.compile(r"^(?: to=(?P<before>[^\s<]+))?<\|channel\|>(?P<channel>[A-Za-z_]+)"
                    r"(?: to=(?P<after>[^\s<]+))?(?P<type> (?:<\|constrain\|>)?\S+)?$")


class HarmonyParser(StateParser):
    tool_states = ("call_args",)

    def __init__(self, tools, call_id, start_in: str = "content"):
        self.tools, self.call_id, self.start_in = ToolIndex(tools), call_id, start_in
        self.index, self.args, self.raw, self.open_call = 0, "", "", False
        super().__init__()

    def start_state(self):
        return self.analysis if self.start_in == "reasoning" else self.header

    # ---- between messages

    def header(self) -> bool:
        pos = self.buf.find(MESSAGE)
        if pos < 0:
            if not self.final and len(self.buf) <= MAX_HEADER:
                return False  # the header is still arriving
            if self.buf:
                self.issue("unreadable message header", self.take(len(self.buf)))
            return not self.final and self.goto(self.skip)
        written = self.take(pos)
        self.take(len(MESSAGE))
        return self.goto(self.body_state(written))

    def body_state(self, written: str):
        match = HEADER.match(written)
        if match is None:
            self.issue("unreadable message header", written + MESSAGE)
            return self.skip
        recipient = match["before"] or match["after"]
        channel = match["channel"]
        if recipient is None:
            if channel == "analysis":
                return self.analysis
            if channel not in ("final", "commentary"):
                self.issue(f"unknown channel {channel!r} read as answer text", written + MESSAGE)
            return self.answer
        return self.call_start(recipient, written, match)

    def call_start(self, recipient: str, written: str, match):
        self.raw = written + MESSAGE
        known, tool = self.tools.resolve(recipient[len("functions."):]) if recipient.startswith("functions.") else (False, None)
        if not known:
            self.issue(f"unknown tool {recipient!r}", self.raw)
            return self.skip
        if match["channel"] != "commentary" or match["type"] != CALL_TYPE:
            self.issue("tool call header read; the history writes '<|channel|>commentary "
                       "<|constrain|>json'", self.raw)
        name = recipient[len("functions."):]
        written_id = self.call_id(self.index, name) + (AFTER_CHANNEL if match["after"] else "")
        self.emit(ToolCallStart(self.index, written_id, tool.name if tool else name, tool.namespace if tool else None))
        self.args, self.open_call = "", True
        return self.call_args

    def next_message(self) -> bool:
        """After ``<|end|>``: ``<|start|>assistant`` opens the next message."""
        got = self.optional(ASSISTANT)
        if got is True:
            return self.goto(self.header)
        if got is False and self.buf:
            self.issue(f"expected {ASSISTANT} after {END}", self.buf[:len(ASSISTANT)])
            return self.goto(self.skip)
        return False

    # ---- message bodies

    def analysis(self) -> bool:
        head, tag = self.scan(BODY_ENDS)
        self.reasoning(head)
        return self.after_body(head, tag)

    def answer(self) -> bool:
        head, tag = self.scan(BODY_ENDS)
        self.text(head)
        return self.after_body(head, tag)

    def after_body(self, head: str, tag: Optional[str]) -> bool:
        if tag == START:
            self.issue(f"message without {END} before {START}", tag)
            self.buf = START + self.buf
            return self.goto(self.next_message)
        if tag is not None:
            return self.goto(self.next_message)
        return bool(head)

    def call_args(self) -> bool:
        head, tag = self.scan(BODY_ENDS)
        self.raw += head + (tag or "")
        if head:
            self.args += head
            self.emit(ToolCallArgsDelta(self.index, head))
        if tag is None:
            return bool(head)
        if tag != CALL:
            self.issue(f"tool call ended by {tag}; the history writes {CALL}", self.raw)
        self.end_call()
        if tag == START:
            self.buf = START + self.buf
        return self.goto(self.next_message)

    def end_call(self) -> None:
        if json_object(self.args):
            self.emit(ToolCallEnd(self.index, self.args))
        else:
            self.issue("tool call arguments are not a JSON object", self.raw)
        self.index, self.open_call, self.raw = self.index + 1, False, ""

    def skip(self) -> bool:
        """A message that is not read: skipped up to the next ``<|start|>``."""
        head, tag = self.scan([START])
        if tag is not None:
            self.buf = START + self.buf
            return self.goto(self.next_message)
        return bool(head)

    def at_end(self) -> None:
        if self.open_call:  # the stop token <|call|> ended it
            self.end_call()

"""Incremental parser of GLM XML output (see :mod:`kvgate.dialects.glm_xml` for the format)."""

from __future__ import annotations

from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"


class GlmParser(TagCallParser):
    value_close = VALUE_CLOSE
    skip_until = CALL_CLOSE
    tool_states = ("call_name", "call_body", "arg_key", "arg_value_open", "value_text", "skip_call")

    def content(self) -> bool:
        head, tag = self.scan(["\n" + THINK_OPEN, THINK_OPEN, THINK_CLOSE, "\n" + CALL_OPEN, CALL_OPEN])
        self.text(head)
        if tag in ("\n" + THINK_OPEN, THINK_OPEN):
            return self.goto(self.reasoning_text)
        if tag == THINK_CLOSE:
            return self.goto(self.after_think)
        if tag is not None:
            self.raw = tag
            return self.goto(self.call_name)
        return bool(head)

    def after_think(self) -> bool:
        return self.optional("\n") is not NEED_MORE and self.goto(self.content)

    def call_name(self) -> bool:
        ends = [pos for pos in (self.buf.find("\n"), self.buf.find("<")) if pos >= 0]
        if not ends:
            if self.final:
                self.raw += self.take(len(self.buf))
                return self.malformed("unclosed tool call")
            return False
        name = self.take(min(ends))
        self.raw += name
        if self.buf.startswith("\n"):
            self.raw += self.take(1)
        return self.begin_call(name.strip(), self.call_body)

    def call_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        for literal, state in ((KEY_OPEN, self.arg_key), (CALL_CLOSE, None)):
            before = self.buf
            got = self.expect(literal)
            if got is NEED_MORE:
                return False
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                if state is None:
                    return self.end_call()
                self.key = ""
                return self.goto(state)
        return self.malformed("expected <arg_key> or </tool_call> in a tool call")

    def arg_key(self) -> bool:
        head, tag = self.scan([KEY_CLOSE])
        self.raw += head + (tag or "")
        self.key += head
        if tag is not None:
            return self.goto(self.arg_value_open)
        return bool(head)

    def arg_value_open(self) -> bool:
        before = self.buf
        got = self.expect(VALUE_OPEN)
        if got is NEED_MORE:
            return False
        self.raw += before[: len(before) - len(self.buf)]
        if got is False:
            return self.malformed("expected <arg_value> after </arg_key>")
        return self.begin_value(self.key.strip(), None, self.call_body)

"""Incremental parser of DeepSeek DSML output (see :mod:`kvgate.dialects.deepseek_dsml`)."""

from __future__ import annotations

import re

from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser

DSML = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
INVOKE_OPEN, INVOKE_CLOSE = f'<{DSML}invoke name="', f"</{DSML}invoke>"
PARAM_OPEN, PARAM_CLOSE = f'<{DSML}parameter name="', f"</{DSML}parameter>"
PARAM_HEAD = re.compile(r'^(.*)" string="(true|false)$', re.DOTALL)
ESCAPED_CLOSE = "lt;/" + PARAM_CLOSE[2:]
ESCAPE = re.compile(r"&((?:amp;)*)" + re.escape(ESCAPED_CLOSE))


def escape_value(text: str) -> str:
    """V4: a closing parameter tag inside a string value is written ``&lt;/｜DSML｜parameter>``;
    text that already reads like that escape gains one ``amp;`` so the mapping stays invertible."""
    bumped = ESCAPE.sub(lambda m: "&amp;" + m.group(1) + ESCAPED_CLOSE, text)
    return bumped.replace(PARAM_CLOSE, "&" + ESCAPED_CLOSE)


def unescape_value(text: str) -> str:
    return ESCAPE.sub(lambda m: ("&" + m.group(1)[4:] + ESCAPED_CLOSE) if m.group(1) else PARAM_CLOSE, text)


class DsmlParser(TagCallParser):
    value_close = PARAM_CLOSE
    skip_until = INVOKE_CLOSE
    tool_states = ("block_body", "invoke_name", "invoke_body", "param_head", "value_text", "skip_call",
                   "skip_block")

    def __init__(self, tools, call_id, start_in="content", block="function_calls", escaping=False):
        self.block_open, self.block_close = f"<{DSML}{block}>", f"</{DSML}{block}>"
        self.escaping = escaping
        self.in_block = False
        super().__init__(tools, call_id, start_in)

    def content(self) -> bool:
        opens = ["\n\n" + self.block_open, "\n" + self.block_open, self.block_open]
        head, tag = self.scan(opens + [THINK_OPEN, THINK_CLOSE, EOS])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.reasoning_text)
        if tag in opens:
            self.in_block, self.raw = True, tag
            return self.goto(self.block_body)
        return bool(head) or tag is not None

    def after_think(self) -> bool:
        return self.goto(self.content)

    def after_call(self):
        return self.block_body

    def _expect_any(self, options) -> object:
        for literal, state in options:
            before = self.buf
            got = self.expect(literal)
            if got is NEED_MORE:
                return NEED_MORE
            if got is True:
                self.raw += before[: len(before) - len(self.buf)]
                return state
        return None

    def block_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self._expect_any([(INVOKE_OPEN, self.invoke_name), (self.block_close, self.content)])
        if state is NEED_MORE:
            return False
        if state is None:
            self.problem = f"expected an invoke or {self.block_close} in the tool calls block"
            return self.goto(self.skip_block)
        if state == self.content:
            self.in_block, self.raw = False, ""
        return self.goto(state)

    def invoke_name(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        name = self.take(pos)
        self.raw += name + self.take(2)
        return self.begin_call(name, self.invoke_body)

    def _unclosed_head(self) -> bool:
        self.raw += self.take(len(self.buf))
        return False

    def invoke_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self._expect_any([(PARAM_OPEN, self.param_head), (INVOKE_CLOSE, "end")])
        if state is NEED_MORE:
            return False
        if state is None:
            return self.malformed(f"expected a parameter or {INVOKE_CLOSE}")
        return self.end_call() if state == "end" else self.goto(state)

    def param_head(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        head = self.take(pos)
        self.raw += head + self.take(2)
        match = PARAM_HEAD.match(head)
        if not match:
            return self.malformed("malformed parameter tag")
        return self.begin_value(match.group(1), match.group(2) == "true", self.invoke_body)

    def decided(self, raw: str) -> str:
        if not self.escaping:
            return raw
        amp = raw.rfind("&")
        if amp < 0:
            return raw
        rest = raw[amp + 1:]
        while rest.startswith("amp;"):
            rest = rest[4:]
        pending = "amp;".startswith(rest) or (ESCAPED_CLOSE.startswith(rest) and rest != ESCAPED_CLOSE)
        return raw[:amp] if pending else raw

    def unescape(self, text: str) -> str:
        return unescape_value(text) if self.escaping else text

    def skip_block(self) -> bool:
        head, tag = self.scan([self.block_close])
        self.raw += head + (tag or "")
        if tag is None and not self.final:
            return bool(head)
        self.issue(self.problem, self.raw)
        self.in_block, self.raw = False, ""
        return self.goto(self.content)

    def at_end(self) -> None:
        was_open = self.call_open
        super().at_end()
        if self.in_block and not was_open:
            self.issue(f"unclosed {self.block_open} block", self.raw)

"""Incremental check that streamed tool arguments stay a prefix of one valid JSON object.

Anthropic clients parse the concatenated ``input_json_delta`` fragments after every fragment,
so a fragment that breaks JSON breaks the client. :class:`JsonObjectPrefix` accepts characters
while the text so far can still become a JSON object, and :meth:`JsonObjectPrefix.closing`
gives the shortest suffix that completes what was accepted.
"""

from __future__ import annotations

import re

_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:(?<=[0-9])[eE][+-]?[0-9]*)?)?")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_CLOSERS = {"o": "}", "a": "]"}
_WHITESPACE = " \t\r\n"
_CLOSING_HEADS = {
    "key_or_end": "", "key": '"":null', "colon": ":null", "value": "null", "value_or_end": "",
    "after": "", "done": "", "string": '"', "escape": 'n"',
}


class JsonObjectPrefix:
    """A pushdown checker for the JSON grammar, restricted to one top-level object."""

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.state = "start"
        self.is_key = False
        self.pending = ""  # the number or literal being read, or the \\u hex digits still due
        self.blocked = False

    def feed(self, text: str) -> int:
        """Accept characters up to the first one that breaks the grammar; return how many."""
        for count, char in enumerate(text):
            if self.blocked or not self._step(char):
                self.blocked = True
                return count
        return len(text)

    def closing(self) -> str:
        """The suffix that turns the accepted text into complete JSON."""
        state = self.state
        if state == "start":
            return "{}"
        if state == "literal":
            head = self.pending
        elif state == "number":
            head = "" if _NUMBER.fullmatch(self.pending) else "0"
        elif state == "unicode":
            head = "0" * len(self.pending) + '"'
        else:
            head = _CLOSING_HEADS[state]
        if state in ("string", "escape", "unicode") and self.is_key:
            head += ":null"
        return head + "".join(_CLOSERS[kind] for kind in reversed(self.stack))

    # -- one character ------------------------------------------------------------------------
    def _step(self, char: str) -> bool:
        state = self.state
        if state == "string":
            return self._in_string(char)
        if state == "escape":
            return self._in_escape(char)
        if state == "unicode":
            if char not in "0123456789abcdefABCDEF":
                return False
            self.pending = self.pending[1:]
            self.state = "string" if not self.pending else "unicode"
            return True
        if state == "number":
            if _NUMBER_PREFIX.fullmatch(self.pending + char):
                self.pending += char
                return True
            if not _NUMBER.fullmatch(self.pending):
                return False
            self._value_done()
            return self._step(char)
        if state == "literal":
            if not self.pending or self.pending[0] != char:
                return False
            self.pending = self.pending[1:]
            if not self.pending:
                self._value_done()
            return True
        if char in _WHITESPACE:
            return True
        return self._structural(char)

    def _structural(self, char: str) -> bool:
        state = self.state
        if state == "start":
            return char == "{" and self._open("o")
        if state in ("key_or_end", "key"):
            if char == "}" and state == "key_or_end":
                return self._close("o")
            return char == '"' and self._begin_string(is_key=True)
        if state == "colon":
            if char != ":":
                return False
            self.state = "value"
            return True
        if state in ("value", "value_or_end"):
            if char == "]" and state == "value_or_end":
                return self._close("a")
            return self._begin_value(char)
        if state == "after":
            return self._after_value(char)
        return False  # "done": nothing but whitespace may follow the object

    def _begin_value(self, char: str) -> bool:
        if char == "{":
            return self._open("o")
        if char == "[":
            return self._open("a")
        if char == '"':
            return self._begin_string(is_key=False)
        if char in "-0123456789":
            self.state, self.pending = "number", char
            return True
        if char in _LITERALS:
            self.state, self.pending = "literal", _LITERALS[char][1:]
            return True
        return False

    def _after_value(self, char: str) -> bool:
        kind = self.stack[-1]
        if char == ",":
            self.state = "key" if kind == "o" else "value"
            return True
        return char == _CLOSERS[kind] and self._close(kind)

    def _in_string(self, char: str) -> bool:
        if char == '"':
            if self.is_key:
                self.state = "colon"
            else:
                self._value_done()
            return True
        if char == "\\":
            self.state = "escape"
            return True
        return ord(char) >= 0x20

    def _in_escape(self, char: str) -> bool:
        if char == "u":
            self.state, self.pending = "unicode", "0000"
            return True
        if char not in '"\\/bfnrt':
            return False  # the state stays "escape": the closing suffix still completes it
        self.state = "string"
        return True

    def _begin_string(self, is_key: bool) -> bool:
        self.state, self.is_key = "string", is_key
        return True

    def _open(self, kind: str) -> bool:
        self.stack.append(kind)
        self.state = "key_or_end" if kind == "o" else "value_or_end"
        return True

    def _close(self, kind: str) -> bool:
        self.stack.pop()
        self._value_done()
        return True

    def _value_done(self) -> None:
        self.pending = ""
        self.state = "after" if self.stack else "done"

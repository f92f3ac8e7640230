"""Custom (freeform) tools as the adapters read and write them.

A custom tool is a :class:`~kvgate.core.types.Tool` with ``custom`` set. Every dialect shows it to
the model as a function with one string parameter ``input``, so a call's ``arguments`` are the JSON
text ``{"input": "..."}`` the model wrote; adapters hand the client the decoded text (the call's
``input``) and turn a resent input back into the same JSON (:func:`input_arguments`: the fence's
JSON style, ``": "`` and ``json.dumps`` escaping; the grammar backend also admits a control
character as a six-character ``u00XX`` escape where ``json.dumps`` writes a short one, which then
re-renders differently).
"""

from __future__ import annotations

import json
import re
from typing import Optional

from kvgate.core.fence.custom import INPUT, input_parameters
from kvgate.core.types import InputFormat, Tool

_HEAD = re.compile(r'\s*\{\s*"input"\s*:\s*"')


def custom_tool(name: str, description: str = "", fmt: Optional[InputFormat] = None,
                namespace: Optional[str] = None) -> Tool:
    return Tool(name=name, description=description, parameters=input_parameters(), namespace=namespace,
                custom=fmt or InputFormat())


def input_arguments(text: str) -> str:
    """The arguments JSON of a call whose input is ``text``, as the model writes it."""
    return json.dumps({INPUT: text}, ensure_ascii=False)


def input_of(arguments: str) -> str:
    """The input text of a custom call's arguments (the arguments themselves if they are not
    ``{"input": <string>}``: nothing the model wrote is lost)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(INPUT), str):
        return value[INPUT]
    return arguments


def custom_tool_of(tools: list[Tool], name: str, namespace: Optional[str]) -> Optional[Tool]:
    """The custom tool a call of ``name`` (in ``namespace``) names, or None (a function tool)."""
    for tool in tools:
        if tool.custom is not None and tool.name == name and tool.namespace == namespace:
            return tool
    return None


def _escape_end(raw: str, at: int) -> Optional[int]:
    """Where the JSON escape at ``raw[at]`` ends, or None while it is incomplete (a surrogate
    pair's halves are kept together)."""
    if at + 1 >= len(raw):
        return None
    if raw[at + 1] != "u":
        return at + 2
    if at + 6 > len(raw):
        return None
    try:
        high = 0xD800 <= int(raw[at + 2:at + 6], 16) < 0xDC00
    except ValueError:
        return at + 6
    if not high:
        return at + 6
    return at + 12 if at + 12 <= len(raw) else None


class InputDecoder:
    """The input text of a call as its JSON arguments stream in: :meth:`feed` returns the text each
    chunk completes, :meth:`finish` the rest once the whole arguments are known."""

    def __init__(self) -> None:
        self.raw = ""
        self.at: Optional[int] = None  # where the undecoded part of the string starts in ``raw``
        self.sent = ""

    def feed(self, chunk: str) -> str:
        self.raw += chunk
        if self.at is None:
            head = _HEAD.match(self.raw)
            if head is None:
                return ""
            self.at = head.end()
        end = self.at
        while end < len(self.raw) and self.raw[end] != '"':
            step = _escape_end(self.raw, end) if self.raw[end] == "\\" else end + 1
            if step is None:
                break
            end = step
        try:
            piece = json.loads('"' + self.raw[self.at:end] + '"')
        except ValueError:
            return ""
        self.at = end
        self.sent += piece
        return piece

    def finish(self, arguments: str) -> str:
        text = input_of(arguments)
        return text[len(self.sent):] if text.startswith(self.sent) else ""

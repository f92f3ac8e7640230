"""A toy tool dialect, as a template for third-party kvgate plugins.

Wire format (one call per line, after any text):

    CALL <name> <arguments JSON>\n

Everything before the first line starting with ``CALL `` is text.
"""

from __future__ import annotations

import json

from kvgate.core.dialect import Dialect, StreamParser
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart

PREFIX = "CALL "


class ToyParser(StreamParser):
    def __init__(self, call_id):
        self.call_id = call_id
        self.buffer = ""
        self.calls = 0

    def _line(self, line: str) -> list:
        if not line.startswith(PREFIX):
            return [TextDelta(line)]
        name, _, arguments = line[len(PREFIX):].partition(" ")
        index, self.calls = self.calls, self.calls + 1
        return [ToolCallStart(index, self.call_id(index, name), name), ToolCallArgsDelta(index, arguments),
                ToolCallEnd(index, arguments)]

    def feed(self, text: str) -> list:
        self.buffer += text
        events = []
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            events += self._line(line) if line.startswith(PREFIX) else [TextDelta(line + "\n")]
        return events

    def finish(self) -> list:
        rest, self.buffer = self.buffer, ""
        return self._line(rest) if rest else []


class ToyDialect(Dialect):
    name = "toy"

    def render_messages(self, messages, tools, tool_choice, *, thinking=None):
        rendered = []
        for message in messages:
            content = message.content
            for call in message.tool_calls:
                content += self.render_tool_call(call.name, call.arguments)
            role = "user" if message.role == "tool" else message.role
            rendered.append({"role": role, "content": content})
        if tools:
            listing = "Tools: " + json.dumps([tool.name for tool in tools])
            rendered.insert(0, {"role": "system", "content": listing})
        return rendered

    def new_parser(self, tools, call_id):
        return ToyParser(call_id)

    def render_tool_call(self, name: str, arguments: str) -> str:
        return f"{PREFIX}{name} {arguments}\n"

    @property
    def literals(self):
        return {"trigger": PREFIX}


@hookimpl
def register_dialects(register):
    register("toy", ToyDialect)

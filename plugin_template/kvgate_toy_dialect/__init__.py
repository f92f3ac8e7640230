"""A toy tool dialect, as a template for third-party kvgate plugins.

Wire format (byte-exact):

* Tools go into a system turn put first: ``'Tools: ' + json([names])`` + per tool
  ``'\\n' + json({"name", "description", "parameters"})`` + ``'\\n' + INSTRUCTION``.
* One call is one line: ``'CALL ' + NAME + ' ' + ARGUMENTS + '\\n'`` (ARGUMENTS the JSON text the
  model wrote, verbatim). An assistant turn is its content followed by its calls.
* A tool result is a user turn: ``'RESULT ' + result``.

Parsing: every complete line that starts with ``'CALL '`` is a call, any other line is text; a
call whose arguments are not JSON is reported as a ParseIssue.

Fence grammar: ``auto`` lets text run until ``'CALL '`` at the start of a line; a call is one of
the tools' names, a space, JSON valid against its parameters and ``'\\n'``. It is built with the
host's composition helpers (:mod:`kvgate.core.fence.compose`), as every dialect's is.

Serves no model by itself (``serves`` answers 0): select it with ``[model] dialect = "toy"``.
"""

from __future__ import annotations

import json

from kvgate.core.dialect import Dialect, StreamParser
from kvgate.core.fence.compose import any_tool, compose, literal
from kvgate.core.fence.grammar import Lit, TextThen, json_node, seq
from kvgate.core.fence.schema import tool_parameters
from kvgate.core.hookspecs import hookimpl
from kvgate.core.types import ParseIssue, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart

PREFIX = "CALL "
INSTRUCTION = "To call a tool, write one line: CALL <name> <arguments as a JSON object>"


class ToyParser(StreamParser):
    """Reads whole lines; a line is decided when its newline (or the end of output) arrives."""

    def __init__(self, call_id):
        self.call_id = call_id
        self.buffer = ""
        self.calls = 0

    def _line(self, line: str, newline: str) -> list:
        if not line.startswith(PREFIX):
            return [TextDelta(line + newline)]
        name, _, arguments = line[len(PREFIX):].partition(" ")
        try:
            json.loads(arguments)
        except ValueError:
            return [ParseIssue(f"arguments of {name!r} are not JSON", line + newline)]
        index, self.calls = self.calls, self.calls + 1
        return [ToolCallStart(index, self.call_id(index, name), name), ToolCallArgsDelta(index, arguments),
                ToolCallEnd(index, arguments)]

    def feed(self, text: str) -> list:
        self.buffer += text
        events = []
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            events += self._line(line, "\n")
        return events

    def finish(self) -> list:
        rest, self.buffer = self.buffer, ""
        return self._line(rest, "") if rest else []

    @property
    def in_tool_region(self) -> bool:
        return self.buffer.startswith(PREFIX)


class ToyDialect(Dialect):
    name = "toy"

    def render_messages(self, messages, tools, tool_choice, *, thinking=None):
        rendered = []
        for message in messages:
            content = message.content
            for call in message.tool_calls:
                content += self.render_tool_call(call.name, call.arguments)
            if message.role == "tool":
                rendered.append({"role": "user", "content": "RESULT " + content})
            else:
                rendered.append({"role": message.role, "content": content})
        if tools:
            rendered.insert(0, {"role": "system", "content": self.tools_block(tools)})
        return rendered

    def tools_block(self, tools) -> str:
        listing = "Tools: " + json.dumps([tool.qualified_name for tool in tools])
        for tool in tools:
            listing += "\n" + json.dumps({"name": tool.qualified_name, "description": tool.description,
                                          "parameters": tool.parameters})
        return listing + "\n" + INSTRUCTION

    def new_parser(self, tools, call_id, *, start_in="content"):
        return ToyParser(call_id)

    def render_tool_call(self, name: str, arguments: str) -> str:
        return f"{PREFIX}{name} {arguments}\n"

    def fence_grammar(self, plan):
        trigger = literal(self, "trigger")

        def one(tool):
            return seq(Lit(tool.qualified_name + " "), json_node(tool_parameters(tool)), Lit("\n"))

        head_auto = TextThen(end=trigger, excludes=(), lead="\n")  # a call starts a line
        return compose(plan, Lit(trigger), head_auto, any_tool(plan, one), trigger, (trigger,))

    @property
    def literals(self):
        return {"trigger": PREFIX}


@hookimpl
def register_dialects(register):
    register("toy", ToyDialect)

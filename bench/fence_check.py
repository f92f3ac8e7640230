"""Judging an output after the fact: do its tool calls parse and validate, and does it re-render?

Used by tests and ``bench/bench_fence.py`` (through ``bench/fence_workload.py``). A call counts as valid when the dialect's own parser
reads it without a ParseIssue, names a request tool, and its arguments validate against the
tool's JSON Schema; a structured answer is valid when it is JSON that validates.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import attrs

from kvgate.core.types import ParseIssue, TextDelta, Tool, ToolCallEnd, ToolCallStart


@attrs.define
class Verdict:
    calls: list[tuple[str, str]] = attrs.field(factory=list)  # (name, arguments text)
    text: str = ""
    problems: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _validate(instance: Any, schema: Any) -> Optional[str]:
    import jsonschema

    try:
        jsonschema.validate(instance, schema)
    except jsonschema.ValidationError as exc:
        return exc.message
    return None


def check_calls(dialect: Any, tools: list[Tool], output: str, start_in: str = "content") -> Verdict:
    """Parse ``output`` with the dialect's parser and validate every call against its tool."""
    verdict = Verdict()
    parser = dialect.new_parser(tools, lambda i, name: f"call_{i}", start_in=start_in)
    names: dict[int, str] = {}
    for event in parser.feed(output) + parser.finish():
        if isinstance(event, ParseIssue):
            verdict.problems.append(f"parse issue: {event.message}")
        elif isinstance(event, TextDelta):
            verdict.text += event.text
        elif isinstance(event, ToolCallStart):
            names[event.index] = event.name
        elif isinstance(event, ToolCallEnd):
            verdict.calls.append((names.get(event.index, ""), event.arguments))
    by_name = {tool.name: tool for tool in tools}
    for name, arguments in verdict.calls:
        tool = by_name.get(name)
        if tool is None:
            verdict.problems.append(f"unknown tool {name!r}")
            continue
        try:
            value = json.loads(arguments)
        except ValueError:
            verdict.problems.append(f"{name}: arguments are not JSON")
            continue
        error = _validate(value, tool.parameters)
        if error:
            verdict.problems.append(f"{name}: {error}")
    return verdict


def check_json(output: str, schema: Any) -> Verdict:
    verdict = Verdict(text=output)
    try:
        value = json.loads(output)
    except ValueError:
        verdict.problems.append("not JSON")
        return verdict
    error = _validate(value, schema)
    if error:
        verdict.problems.append(error)
    return verdict

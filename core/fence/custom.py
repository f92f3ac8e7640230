"""Fencing custom (freeform) tools: the tool's grammar becomes the ``pattern`` of its ``input`` string.

Every dialect shows a custom tool to the model as a function with one required string parameter,
``input`` (:func:`input_parameters`). A "regex" grammar is the pattern as given; any other syntax
("lark": the ``lark_grammar`` plugin) is translated into one by the :class:`ToolGrammarSyntax`
registered for it through ``register_tool_grammars``; "text" (or no format) is any text. The
pattern is anchored, and the JSON schema keeps the shape the model is shown, so every dialect
fences the call with its ordinary string handling: JSON-escaped where the dialect writes JSON, raw
between tags where it writes tags. A grammar that cannot be enforced is a 400
(:class:`~kvgate.core.fence.errors.FenceRequestError`) naming the tool, never silently dropped.
"""

from __future__ import annotations

import re
from typing import Optional, Protocol

import attrs

from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.plugins import collect
from kvgate.core.types import ChatRequest, InputFormat, Tool

INPUT = "input"
MAX_REGEX_CHARS = 4096  # the JSON-schema preparer's default pattern limit
UNSUPPORTED_REGEX = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=|\\[gk]<")  # look-around, back-references


class GrammarError(ValueError):
    """The grammar cannot be enforced (the message says why)."""


class ToolGrammarSyntax(Protocol):
    """A custom tools' grammar syntax (registered under its ``syntax`` name, e.g. "lark")."""

    def to_regex(self, definition: str) -> str:
        """The regex (unanchored, in the syntax Python's ``re`` and Rust's ``regex`` share) matching
        exactly the texts ``definition`` admits; raises :class:`GrammarError` saying why when the
        grammar cannot be expressed so (recursion, unsupported features, too large)."""


def input_parameters() -> dict:
    """The parameters a custom tool shows the model: one required string, ``input``."""
    return {"type": "object", "properties": {INPUT: {"type": "string"}}, "required": [INPUT],
            "additionalProperties": False}


def tool_grammars(pm) -> dict[str, ToolGrammarSyntax]:
    """The grammar syntaxes ``pm``'s plugins register, by name."""
    registry = collect(pm, "register_tool_grammars", "tool grammar syntax")
    return {name: registry.get(name) for name in registry.names()}


def input_pattern(fmt: InputFormat, syntaxes: dict[str, ToolGrammarSyntax]) -> Optional[str]:
    """The anchored regex a custom tool's input must match (None: any text); GrammarError when
    the grammar cannot be enforced."""
    if fmt.syntax == "text":
        return None
    if fmt.syntax == "regex":
        regex = fmt.definition
        if UNSUPPORTED_REGEX.search(regex):
            raise GrammarError("the regex uses look-around or a back-reference, which cannot be enforced")
    elif fmt.syntax in syntaxes:
        regex = syntaxes[fmt.syntax].to_regex(fmt.definition)
    else:
        raise GrammarError(f"no plugin enforces grammar syntax {fmt.syntax!r} (registered: "
                           f"{', '.join(['regex', *sorted(syntaxes)])})")
    if len(regex) > MAX_REGEX_CHARS:
        raise GrammarError(f"the grammar is too large to enforce ({len(regex)} regex characters, "
                           f"over {MAX_REGEX_CHARS})")
    return f"^(?:{regex})$"


def fenced_parameters(tool: Tool, syntaxes: dict[str, ToolGrammarSyntax]) -> dict:
    """The schema the fence enforces for a custom tool's arguments (a 400 naming the tool when
    its grammar cannot be enforced)."""
    try:
        pattern = input_pattern(tool.custom, syntaxes)
    except GrammarError as exc:
        raise FenceRequestError(f"The grammar of custom tool {tool.name!r} cannot be enforced: {exc}.",
                                param="tools") from None
    parameters = input_parameters()
    if pattern is not None:
        parameters["properties"][INPUT]["pattern"] = pattern
    return parameters


def with_fenced_custom_tools(request: ChatRequest, pm) -> ChatRequest:
    """``request`` with each custom tool's parameters carrying its grammar's pattern."""
    if not any(tool.custom is not None for tool in request.tools):
        return request
    syntaxes = tool_grammars(pm)
    tools = [attrs.evolve(tool, parameters=fenced_parameters(tool, syntaxes)) if tool.custom is not None else tool
             for tool in request.tools]
    return attrs.evolve(request, tools=tools)


def refuse_relaxed_grammars(request: ChatRequest, relaxed: list[str]) -> None:
    """A custom tool's pattern that the schema preparer had to drop (the backend cannot compile it,
    or it is too long) is a 400: its grammar would otherwise go unenforced."""
    for tool in request.tools:
        if tool.custom is None or tool.custom.syntax == "text":
            continue
        for note in relaxed:  # its schema is one string: whatever was relaxed is the pattern
            if note.startswith(f"tool {tool.name!r}: "):
                raise FenceRequestError(f"The grammar of custom tool {tool.name!r} cannot be enforced by the "
                                        f"grammar backend: {note}.", param="tools")

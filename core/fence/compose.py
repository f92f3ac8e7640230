"""Helpers a dialect composes its fence grammar from (see ``Dialect.fence_grammar``).

Every dialect grammar has the same shape: an answer part (free text, or the response JSON) and a
calls part. ``auto`` lets text run until the trigger (then the call grammar arms), ``required``
starts with the call, ``none`` keeps the answer part with the trigger excluded. A dialect supplies
its own literals and the grammar of one call; these helpers do the rest.
"""

from __future__ import annotations

from typing import Any, Callable

from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.grammar import FreeText, Lit, Node, Repeat, TextThen, alt, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup
from kvgate.core.types import Tool


def literal(dialect: Any, key: str) -> str:
    """``dialect.literals[key]``; a FenceError naming the dialect when it is missing."""
    value = dialect.literals.get(key)
    if not value and value != "":
        raise FenceError(f"dialect {dialect.name!r} has no literal {key!r}, which its fence grammar needs")
    return value


def any_tool(plan: FencePlan, one: Callable[[Tool], Node]) -> Node:
    """One call of any of the plan's tools (``one(tool)`` is the grammar of a call of ``tool``)."""
    return alt(*[one(tool) for tool in plan.tools]) if plan.tools else Lit("")


def calls_part(first: Node, separator: str, plan: FencePlan) -> Node:
    """``first`` then up to ``max_calls - 1`` more calls, each introduced by ``separator``."""
    more = None if plan.max_calls is None else plan.max_calls - 1
    if more == 0:
        return first
    return seq(first, Repeat(seq(Lit(separator), first), 0, more))


def answer_part(plan: FencePlan, excludes: tuple[str, ...]) -> Node:
    """The answer: JSON for a response format (the trigger kept out of its strings), else text."""
    if plan.response_schema is not None:
        schema = exclude_markup(plan.response_schema, excludes) if plan.tools else plan.response_schema
        return json_node(schema)
    return FreeText(excludes)


def compose(plan: FencePlan, head_required: Node, head_auto: Node, body: Node, separator: str,
            excludes: tuple[str, ...], closing: str = "") -> Node:
    """The whole output for ``plan``: ``head`` opens the first call, ``body`` is one call after it,
    ``closing`` ends the block of calls."""
    answer = answer_part(plan, excludes)
    if plan.mode == "none" or not plan.tools:
        return answer
    calls = seq(calls_part(body, separator, plan), Lit(closing))
    if plan.mode == "required":
        return seq(head_required, calls)
    opening = head_required if plan.response_schema is not None else head_auto
    return alt(answer, seq(opening, calls))


def with_reasoning(dialect: Any, plan: FencePlan, rest: Node, after_think: str = "") -> Node:
    """When the completion starts inside reasoning, free thinking up to the closing tag first."""
    if plan.start_in != "reasoning":
        return rest
    close = literal(dialect, "think_close")
    opened = dialect.literals.get("think_open", "")
    return seq(TextThen(end=close, excludes=(opened,) if opened else ()), Lit(after_think), rest)


def tag_value(schema: Any, string: bool, close: str, markup: tuple[str, ...]) -> Node:
    """One argument value written between tags: raw text for a string, else compact JSON; then ``close``."""
    if string:
        return raw_string(schema if isinstance(schema, dict) else {}, close, markup)
    return seq(json_node(exclude_markup(schema if isinstance(schema, dict) else {}, markup)), Lit(close))


def raw_string(schema: dict, close: str, markup: tuple[str, ...]) -> Node:
    """A string written raw up to ``close``: enum / const choices, length bounds, and an anchored
    ``pattern`` (``^...$``, as custom tools' grammars are written: :mod:`.custom`); an unanchored
    one is not enforced on raw values."""
    choices = schema.get("enum") if "enum" in schema else ([schema["const"]] if "const" in schema else None)
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return alt(*[Lit(choice + close) for choice in choices])
    low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
    high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
    pattern = schema.get("pattern")
    anchored = isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$")
    return TextThen(end=close, excludes=markup, min_chars=max(0, low), max_chars=high,
                    pattern=pattern[1:-1] if anchored else None)

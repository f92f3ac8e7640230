"""Per-dialect fence grammars, each built from the dialect's own literals.

A dialect may build its own grammar (a ``fence_grammar(plan)`` method returning a grammar node);
otherwise the builder registered here under the dialect's name is used. Every builder follows
the same shape: an answer part (free text, or the response JSON) and a calls part; ``auto`` lets
text run until the trigger (then the call grammar arms), ``required`` starts with the call,
``none`` keeps the answer part with the trigger excluded.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.grammar import FreeText, Lit, Node, Repeat, TextThen, alt, json_node, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, tool_parameters

Builder = Callable[[Any, FencePlan], Node]


def literal(dialect: Any, key: str) -> str:
    value = dialect.literals.get(key)
    if not value and value != "":
        raise FenceError(f"dialect {dialect.name!r} has no literal {key!r}, which its fence grammar needs")
    return value


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


def chatml_json(dialect: Any, plan: FencePlan) -> Node:
    trigger = literal(dialect, "trigger")
    prefix, args_prefix = literal(dialect, "call_prefix"), literal(dialect, "args_prefix")
    suffix, separator = literal(dialect, "call_suffix"), literal(dialect, "call_separator")
    if not prefix.startswith(trigger):
        raise FenceError(f"chatml_json: call prefix {prefix!r} does not start with the trigger {trigger!r}")
    markup = (literal(dialect, "call_open"), literal(dialect, "call_close"))

    def one(tool) -> Node:
        schema = exclude_markup(tool_parameters(tool), markup)
        return seq(Lit(prefix[len(trigger):] + tool.qualified_name + args_prefix), json_node(schema), Lit(suffix))

    body = alt(*[one(tool) for tool in plan.tools]) if plan.tools else Lit("")
    head_auto = TextThen(end=trigger, excludes=markup[1:], lead=separator)
    rest = compose(plan, Lit(trigger), head_auto, body, separator + trigger, (trigger,))
    return with_reasoning(dialect, plan, rest, "\n\n")


BUILDERS: dict[str, Builder] = {"chatml_json": chatml_json}


def register_builder(name: str, builder: Builder) -> None:
    BUILDERS[name] = builder


def grammar_for(dialect: Any, plan: FencePlan) -> Optional[Node]:
    """The grammar node of ``plan`` in ``dialect``'s syntax, or None when nothing is constrained."""
    if not plan.constrains:
        return None
    own = getattr(dialect, "fence_grammar", None)
    if callable(own):
        return own(plan)
    import kvgate.core.fence.grammars_tags  # noqa: F401  (registers the tag dialects' builders)

    builder = BUILDERS.get(getattr(dialect, "name", ""))
    if builder is None:
        raise FenceError(f"no fence grammar for dialect {getattr(dialect, 'name', dialect)!r} "
                         f"(known: {', '.join(sorted(BUILDERS))})")
    return builder(dialect, plan)

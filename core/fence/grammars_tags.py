"""Fence grammars of the dialects that write one tag per argument: GLM XML and DeepSeek DSML.

Parameters come in any order, each at most once, every required one before the call closes
(``AnyOrder``). String parameters are raw text up to the value's closing tag with the dialect's
markup excluded (DSML: anything that opens a tag, ``<｜DSML｜`` or ``</｜DSML｜``); other values are
compact JSON valid against the parameter's schema.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.fence.grammar import AnyOrder, Field, Lit, Node, TextThen, alt, json_node, seq
from kvgate.core.fence.grammars import compose, literal, register_builder, with_reasoning
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import exclude_markup, is_string_schema, properties

GLM_MARKUP = ("trigger", "call_close", "key_open", "key_close", "value_open", "value_close")
DSML_MARKUP = ("trigger", "block_close", "invoke_open", "invoke_close", "param_open", "param_close")


def value(schema: Any, string: bool, close: str, markup: tuple[str, ...]) -> Node:
    if string:
        return raw_string(schema if isinstance(schema, dict) else {}, close, markup)
    return seq(json_node(exclude_markup(schema if isinstance(schema, dict) else {}, markup)), Lit(close))


def raw_string(schema: dict, close: str, markup: tuple[str, ...]) -> Node:
    """A string written raw up to ``close``: enum / const choices, length bounds (a ``pattern`` is
    not enforced on raw values)."""
    choices = schema.get("enum") if "enum" in schema else ([schema["const"]] if "const" in schema else None)
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        return alt(*[Lit(choice + close) for choice in choices])
    low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
    high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
    return TextThen(end=close, excludes=markup, min_chars=max(0, low), max_chars=high)


def glm_xml(dialect: Any, plan: FencePlan) -> Node:
    lit = lambda key: literal(dialect, key)  # noqa: E731
    sep, trigger = dialect.literals.get("separator", ""), lit("trigger")
    markup = tuple(lit(key) for key in GLM_MARKUP)

    def field(key: str, schema: Any, required: bool) -> Field:
        head = Lit(lit("key_open") + key + lit("key_close") + sep + lit("value_open"))
        body = seq(head, value(schema, is_string_schema(schema), lit("value_close"), markup), Lit(sep))
        return Field(body, required)

    def one(tool) -> Node:
        fields = tuple(field(k, s, r) for k, s, r in properties(tool))
        params = AnyOrder(fields) if fields else Lit("")
        return seq(Lit(tool.qualified_name + sep), params, Lit(lit("call_close")))

    body = alt(*[one(tool) for tool in plan.tools]) if plan.tools else Lit("")
    head_auto = TextThen(end=sep + trigger, excludes=markup)
    rest = compose(plan, Lit(sep + trigger), head_auto, body, sep + trigger, (trigger,))
    return with_reasoning(dialect, plan, rest)


def deepseek_dsml(dialect: Any, plan: FencePlan) -> Node:
    lit = lambda key: literal(dialect, key)  # noqa: E731
    markup = tuple(lit(key) for key in DSML_MARKUP)
    dsml = dialect.literals.get("dsml", "")
    if dsml:  # every tag opens with one of these: a value may not start any tag, in any token split
        markup = ("<" + dsml, "</" + dsml)
    flags = {True: lit("param_string_true"), False: lit("param_string_false")}

    def field(key: str, schema: Any, required: bool) -> Field:
        string = is_string_schema(schema)
        kinds = [string] if (schema and "type" in schema) or string else [True, False]
        bodies = [seq(Lit(lit("param_open") + key + flags[kind]),
                      value(schema, kind, lit("param_close"), markup), Lit("\n")) for kind in kinds]
        return Field(alt(*bodies), required)

    def one(tool) -> Node:
        head = Lit(lit("invoke_open") + tool.qualified_name + lit("invoke_head_close"))
        fields = tuple(field(k, s, r) for k, s, r in properties(tool))
        params = AnyOrder(fields, empty="\n") if fields else Lit("\n")
        return seq(head, params, Lit(lit("invoke_close")))

    block_open, block_close = lit("block_open"), lit("block_close")
    invokes = alt(*[one(tool) for tool in plan.tools]) if plan.tools else Lit("")
    head_auto = seq(TextThen(end=block_open.rstrip("\n"), excludes=markup), Lit("\n"))
    rest = compose(plan, Lit(block_open), head_auto, invokes, "\n", (lit("trigger"),), "\n" + block_close)
    return with_reasoning(dialect, plan, rest)


register_builder("glm_xml", glm_xml)
register_builder("deepseek_dsml", deepseek_dsml)

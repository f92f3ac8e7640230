"""The fence grammar of one Gemma 4 call, values in Gemma's own syntax (:mod:`.values`), so a
fenced call is what the chat template renders for it.

``NAME{`` + the arguments in ``dictsort`` order (every required one present, each optional one at
most once, ``','`` between) + ``}<tool_call|>``. A value by its schema: a string ``<|"|>`` + raw text
that opens none of the call markup + ``<|"|>``; an integer or number as :mod:`.numbers` has it; ``true`` /
``false``; null ``None``; an ``enum`` / ``const`` one of its values as the template writes it; an
object with declared properties ``{`` + its properties as the arguments are + ``}``; an array with
an ``items`` schema ``[`` + items within ``minItems`` / ``maxItems`` + ``]``; a list of types or
``anyOf`` / ``oneOf`` any of them; a local ``$ref`` its definition. A schema that declares no
structure (``{}``, no ``type``, an object without properties, an array without ``items``, a ``$ref``
past ``REF_DEPTH``) is a free value in Gemma's syntax (:mod:`.free_values`); an object without
properties has its ``additionalProperties`` schema for each member's value when it gives one.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.fence.compose import raw_string
from kvgate.core.fence.grammar import Lit, Node, Repeat, alt, seq
from kvgate.core.fence.schema import properties, tool_parameters
from kvgate.core.types import Tool
from kvgate.dialects.gemma4.free_values import DEPTH, free_array, free_object, free_value
from kvgate.dialects.gemma4.numbers import number_node
from kvgate.dialects.gemma4.parser import CALL_CLOSE, CALL_OPEN, RESPONSE_OPEN
from kvgate.dialects.gemma4.values import QUOTE, format_argument

MARKUP = (CALL_OPEN, CALL_CLOSE, RESPONSE_OPEN)  # a JSON string writes <|"|> as <|\\"|>: not the delimiter
REF_DEPTH = 4  # $ref expansions on one path (a recursive schema's deeper values are free values)


def one_call(tool: Tool) -> Node:
    """``NAME{`` + the arguments + ``}<tool_call|>``."""
    root = tool_parameters(tool)
    members = sorted(properties(tool), key=lambda field: field[0].lower())
    return seq(Lit(tool.qualified_name + "{"), members_node(members, root, 0, "}" + CALL_CLOSE))


def members_node(members: list[tuple[str, Any, bool]], root: dict, depth: int, close: str) -> Node:
    nodes = [(seq(Lit(key + ":"), value_node(schema, root, depth)), required) for key, schema, required in members]
    return members_then_close(nodes, 0, close)


def members_then_close(members: list[tuple[Node, bool]], first: int, close: str) -> Node:
    """Members ``first``.. (a required one present, an optional one maybe), then ``close``."""
    if first == len(members):
        return Lit(close)
    node, required = members[first]
    later = [seq(Lit(","), n) if r else Repeat(seq(Lit(","), n), 0, 1) for n, r in members[first + 1:]]
    present = seq(node, *later, Lit(close))
    return present if required else alt(present, members_then_close(members, first + 1, close))


def value_node(schema: Any, root: dict, depth: int = 0) -> Node:
    """One value valid against ``schema``, in Gemma's syntax."""
    if not isinstance(schema, dict):
        return free_value(MARKUP)
    if "$ref" in schema:
        target = definition(schema["$ref"], root)
        return value_node(target, root, depth + 1) if target is not None and depth < REF_DEPTH else free_value(MARKUP)
    choices = schema["enum"] if isinstance(schema.get("enum"), list) else (
        [schema["const"]] if "const" in schema else None)
    if choices:
        return alt(*[Lit(format_argument(choice, escape_keys=False)) for choice in choices])
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list) and options and "type" not in schema:
        return alt(*[value_node(option, root, depth) for option in options])
    kind = schema.get("type", "object" if "properties" in schema else "array" if "items" in schema else None)
    if isinstance(kind, list) and kind:
        return alt(*[value_node({**schema, "type": one}, root, depth) for one in kind])
    return typed_node(kind, schema, root, depth)


def typed_node(kind: Any, schema: dict, root: dict, depth: int) -> Node:
    if kind == "string":
        return seq(Lit(QUOTE), raw_string(schema, QUOTE, MARKUP))
    if kind in ("integer", "number"):
        return number_node(schema)
    if kind == "boolean":
        return alt(Lit("true"), Lit("false"))
    if kind == "null":
        return Lit("None")
    if kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        required = set(schema.get("required") or [])
        fields = sorted(((k, v, k in required) for k, v in schema["properties"].items()), key=lambda f: f[0].lower())
        return seq(Lit("{"), members_node(fields, root, depth, "}"))
    if kind == "array" and isinstance(schema.get("items"), dict):
        return array_node(value_node(schema["items"], root, depth), schema)
    if kind == "object":
        return open_object(schema.get("additionalProperties"), root, depth)
    if kind == "array":
        return free_array(free_value(MARKUP, DEPTH - 1))
    return free_value(MARKUP)


def open_object(additional: Any, root: dict, depth: int) -> Node:
    """An object without declared properties: ``{}`` only when no others are allowed, else bare
    keys with values of the ``additionalProperties`` schema (free ones when it gives none)."""
    if additional is False:
        return Lit("{}")
    typed = isinstance(additional, dict) and additional
    return free_object(value_node(additional, root, depth) if typed else free_value(MARKUP, DEPTH - 1))


def array_node(item: Node, schema: dict) -> Node:
    low = schema.get("minItems") if isinstance(schema.get("minItems"), int) else 0
    high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
    if high == 0:
        return Lit("[]")
    more = Repeat(seq(Lit(","), item), max(0, low - 1), None if high is None else high - 1)
    items = seq(Lit("["), item, more, Lit("]"))
    return items if low > 0 else alt(Lit("[]"), items)


def definition(ref: Any, root: dict) -> Any:
    """The schema a local ``#/$defs/NAME`` or ``#/definitions/NAME`` reference names, else None."""
    for prefix in ("#/$defs/", "#/definitions/"):
        if isinstance(ref, str) and ref.startswith(prefix):
            return (root.get(prefix[2:-1]) or {}).get(ref[len(prefix):])
    return None


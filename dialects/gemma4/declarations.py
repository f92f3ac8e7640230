"""Tool declarations as Gemma 4's chat template writes them (its ``format_function_declaration`` and
``format_parameters`` macros), for :mod:`.chat_format`.

``'declaration:' + NAME + '{description:<|"|>' + DESCRIPTION + '<|"|>'``, then when the tool has
parameters ``',parameters:{'`` + ``'properties:{' + PROPERTIES + '},'`` (when there are any) +
``'required:[' + <|"|>NAME<|"|>,... + '],'`` (when any) + ``'type:<|"|>' + TYPE + '<|"|>}'`` (when
the schema has a type: without one the template leaves the brace open), then ``'}'``.

PROPERTIES, sorted as ``dictsort`` sorts: per property ``KEY + ':{'`` + ``description:<|"|>...<|"|>``,
a string's ``enum:[...]``, an array's ``items:{...}`` (its keys sorted; ``properties``, ``required``
and ``type`` (upper-cased) written as above, any other key through ``format_argument``),
``nullable:true``, an object's ``properties:{...}`` (without declared properties, its own
non-standard keys as properties) and ``required:[...]``, then ``type:<|"|>TYPE<|"|>}``; members
joined by ``','``. TYPE is Jinja's ``upper`` of the schema's ``type``: Python's ``str`` of it
upper-cased, ``''`` when absent. A schema that is not an object reads as one without keys, as
Jinja's undefined lookups do.
"""

from __future__ import annotations

from typing import Any

from kvgate.dialects.gemma4.values import QUOTE, dictsort, format_argument

STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")


class Undefined:
    """A lookup that found nothing: falsy and written as ``''``, as Jinja's undefined."""

    def __bool__(self) -> bool:
        return False


MISSING = Undefined()


def declaration(function: dict[str, Any]) -> str:
    """``<|tool>`` + the declaration of an OpenAI function object + ``<tool|>``."""
    out = f"declaration:{function['name']}{{description:{QUOTE}{text(function.get('description', MISSING))}{QUOTE}"
    params = function.get("parameters")
    if params:
        out += ",parameters:{"
        if item(params, "properties"):
            out += "properties:{" + format_parameters(params["properties"]) + "},"
        if item(params, "required"):
            out += "required:[" + quoted_list(params["required"]) + "],"
        if item(params, "type"):
            out += f"type:{QUOTE}{upper(params['type'])}{QUOTE}}}"
    return "<|tool>" + (out + "}").strip() + "<tool|>"


def format_parameters(properties: Any, filter_keys: bool = False) -> str:
    members = []
    for key, value in dictsort(properties):
        if not filter_keys or key not in STANDARD_KEYS:
            members.append(f"{key}:{{" + ",".join(property_parts(value)) + "}")
    return ",".join(members)


def property_parts(value: Any) -> list[str]:
    """The members of one property's braces (``add_comma`` is the join)."""
    kind, parts = upper(item(value, "type")), []
    if item(value, "description"):
        parts.append(f"description:{QUOTE}{text(value['description'])}{QUOTE}")
    if kind == "STRING" and item(value, "enum"):
        parts.append("enum:" + format_argument(value["enum"]))
    elif kind == "ARRAY" and isinstance(item(value, "items"), dict) and value["items"]:
        parts.append("items:{" + items_parts(value["items"]) + "}")
    if item(value, "nullable"):
        parts.append("nullable:true")
    if kind == "OBJECT":
        inner = item(value, "properties")
        nested = format_parameters(inner) if isinstance(inner, dict) else format_parameters(value, True)
        parts.append("properties:{" + nested + "}")
        if item(value, "required"):
            parts.append("required:[" + quoted_list(value["required"]) + "]")
    return parts + [f"type:{QUOTE}{kind}{QUOTE}"]


def items_parts(items: dict[str, Any]) -> str:
    parts = []
    for key, value in dictsort(items):
        if value is None:
            continue
        if key == "properties":
            parts.append("properties:{" + (format_parameters(value) if isinstance(value, dict) else "") + "}")
        elif key == "required":
            parts.append("required:[" + quoted_list(value) + "]")
        elif key == "type":
            kind = value.upper() if isinstance(value, str) else [upper(v) for v in value]
            parts.append("type:" + format_argument(kind))
        else:
            parts.append(f"{key}:{format_argument(value)}")
    return ",".join(parts)


def item(value: Any, key: str) -> Any:
    """Jinja's ``value[key]``: MISSING (falsy as Jinja's undefined) unless ``value`` is a mapping."""
    return value.get(key, MISSING) if isinstance(value, dict) else MISSING


def upper(value: Any) -> str:
    return "" if value is MISSING else text(value).upper()


def text(value: Any) -> str:
    """What ``{{ value }}`` writes."""
    return "" if value is MISSING else str(value)


def quoted_list(values: Any) -> str:
    return ",".join(QUOTE + text(v) + QUOTE for v in values)

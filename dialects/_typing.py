"""Typing one argument value by the tool's JSON Schema, and the variants real models write.

The tag dialects (GLM, DSML, Qwen3-Coder) carry a value as text; its JSON type comes from the
parameter's schema. Models write a few variants that still say the value plainly: GLM-4.6 escapes
the quotes of an array or object (``[{\\"a\\": 1}]``), DeepSeek flags a number ``string="true"``.
Each reader here returns the JSON text the value means, or None when its variant does not apply;
the caller reports a variant it read (a ParseIssue), since the history then renders the
canonical spelling and the next prompt differs from the generated text from that call on.
"""

from __future__ import annotations

import json
from typing import Any, Optional


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    for kind, name in ((float, "number"), (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null"


def schema_types(schema: Any) -> Optional[frozenset]:
    """The JSON types ``schema`` admits (``type``, ``const``, ``enum``, ``anyOf`` / ``oneOf``), or
    None when it does not say (any value)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset([kind])
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    if "const" in schema:
        return frozenset([json_type(schema["const"])])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return frozenset(json_type(item) for item in schema["enum"])
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            found = [schema_types(branch) for branch in branches]
            return None if any(f is None for f in found) else frozenset().union(*found)
    return None


def admits_no_string(schema: Any) -> bool:
    """True when the schema says the value's type and a string is not among them."""
    types = schema_types(schema)
    return types is not None and "string" not in types


def reads_as(text: str, types: Optional[frozenset] = None) -> bool:
    """True when ``text`` is JSON (of one of ``types``, when given; an integer is a number)."""
    try:
        kind = json_type(json.loads(text))
    except (ValueError, RecursionError):
        return False
    return types is None or kind in types or (kind == "integer" and "number" in types)


def flagged_string_value(text: str, schema: Any) -> Optional[str]:
    """A value flagged as a string (DSML ``string="true"``) for a parameter whose schema admits no
    string: the text as JSON when it reads as one of the schema's types (``42`` for an integer)."""
    if not admits_no_string(schema) or text != text.strip():
        return None
    return text if reads_as(text, schema_types(schema)) else None


def escaped_json_value(raw: str, schema: Any) -> Optional[str]:
    """An array or object value written with its quotes escaped (GLM-4.6: ``[{\\"a\\": 1}]``): the
    unescaped text when ``raw`` is not JSON itself and the unescaped text reads as the schema's type."""
    types = schema_types(schema)
    if types is None or not types & {"array", "object"} or '\\"' not in raw or reads_as(raw):
        return None
    try:
        text = json.loads('"' + raw + '"', strict=False)
    except (ValueError, RecursionError):
        return None
    return text if reads_as(text, types & {"array", "object"}) else None


def json_object(text: str) -> bool:
    """True when ``text`` is one JSON object (a tool call's arguments)."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False

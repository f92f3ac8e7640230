"""Small JSON Schema builders (draft 2020-12, as OpenAPI 3.1 uses) for the request schemas the
adapters publish. The adapters read a null field as an absent one, so optional fields accept null,
and other keys are allowed, as the adapters ignore fields they do not know."""

from __future__ import annotations

from typing import Any, Iterable, Optional

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
NAME: Schema = {"type": "string", "minLength": 1}
BOOLEAN: Schema = {"type": "boolean"}
ANY_OBJECT: Schema = {"type": "object"}
NULL: Schema = {"type": "null"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return schema
    if "enum" in schema:
        schema = {**schema, "enum": [*schema["enum"], None]}
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    if isinstance(kind, list):
        return {**schema, "type": [*kind, "null"]}
    return {"anyOf": [schema, NULL]}


def obj(properties: Schema, required: Iterable[str] = (), nulls: bool = True, **more: Any) -> Schema:
    """An object with ``properties``; those not ``required`` may be null when ``nulls``."""
    needed = list(required)
    props = {key: value if key in needed or not nulls else nullable(value) for key, value in properties.items()}
    schema: Schema = {"type": "object", "properties": props, **more}
    if needed:
        schema["required"] = needed
    return schema


def array(items: Schema, min_items: int = 0, **more: Any) -> Schema:
    schema: Schema = {"type": "array", "items": items, **more}
    if min_items:
        schema["minItems"] = min_items
    return schema


def integer(low: Optional[int] = None, high: Optional[int] = None) -> Schema:
    return _bounded({"type": "integer"}, low, high)


def number(low: Optional[float] = None, high: Optional[float] = None) -> Schema:
    return _bounded({"type": "number"}, low, high)


def _bounded(schema: Schema, low: Optional[float], high: Optional[float]) -> Schema:
    if low is not None:
        schema["minimum"] = low
    if high is not None:
        schema["maximum"] = high
    return schema


def when(key: str, value: Any, then: Schema, default_applies: bool = False) -> Schema:
    """``then`` applies where ``key`` is ``value`` (with ``default_applies``, also where it is absent or null)."""
    condition: Schema = {"properties": {key: {"const": value}}, "required": [key]}
    if default_applies:
        condition = {"anyOf": [condition, {"not": {"required": [key]}}, {"properties": {key: NULL}}]}
    return {"if": condition, "then": then}


def needs(key: str, schema: Schema) -> Schema:
    """A ``then`` clause: ``key`` is present, not null, and matches ``schema``."""
    return {"required": [key], "properties": {key: schema}}


def fallback(key: str, unset: Schema, properties: Schema) -> Schema:
    """A clause: ``properties`` are checked only while ``key`` matches ``unset``, as an adapter reads
    them only in place of a preferred field that is not given."""
    return {"if": {"properties": {key: unset}}, "then": {"properties": properties}}

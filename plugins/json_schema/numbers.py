"""Numeric keywords the grammar backend cannot enforce, found and dropped one by one.

llguidance turns bounds into regexes, so valid but extreme numbers (``maxLength: 10**18``,
``multipleOf: 1e-300``, ``minimum: 1e308``, a float range that spans too many digits) do not
compile. Each schema node's numeric keywords are probed alone, typed as the node is; the ones that
fail are dropped and noted, and the node's others are kept -- unless they still fail together, then
all of that node's are dropped. ``type``, ``properties``, ``required``, ``enum`` and the rest stay,
so a required key is still required (issue 31, finding 11).
"""

from __future__ import annotations

from typing import Any, Callable

from kvgate.plugins.json_schema.keywords import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_VALUED

# keyword -> the type a probe of it alone declares (a node's own type wins where it fits)
NUMERIC = {
    "minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number",
    "multipleOf": "number", "minLength": "string", "maxLength": "string", "minItems": "array",
    "maxItems": "array", "minProperties": "object", "maxProperties": "object",
}
Probe = Callable[[dict], str]  # schema -> why it does not compile, or ''


def drop_unenforceable_numbers(schema: Any, probe: Probe, notes: list[str], path: str = "") -> Any:
    """A copy of ``schema`` without the numeric keywords ``probe`` refuses; notes each drop."""
    if not isinstance(schema, dict):
        return schema
    out = {key: _walk(key, value, probe, notes, f"{path}/{key}") for key, value in schema.items()}
    numbers = {key: value for key, value in out.items() if key in NUMERIC}
    if not numbers:
        return out
    kind = out.get("type") if out.get("type") == "integer" else None
    failing = {key for key, value in numbers.items() if probe({"type": kind or NUMERIC[key], key: value})}
    kept = {key: value for key, value in numbers.items() if key not in failing}
    if kept and probe({"type": kind or NUMERIC[next(iter(kept))], **kept}):
        failing |= set(kept)
    for key in sorted(failing):
        notes.append(f"{key} {numbers[key]!r} at {path or '/'} not enforced (the grammar engine cannot "
                     f"express it)")
    return {key: value for key, value in out.items() if key not in failing}


def _walk(key: str, value: Any, probe: Probe, notes: list[str], path: str) -> Any:
    if key in SCHEMA_MAPS and isinstance(value, dict):
        return {name: drop_unenforceable_numbers(sub, probe, notes, f"{path}/{name}") for name, sub in value.items()}
    if (key in SCHEMA_LISTS or key == "items") and isinstance(value, list):
        return [drop_unenforceable_numbers(sub, probe, notes, f"{path}/{i}") for i, sub in enumerate(value)]
    if key in SCHEMA_VALUED:
        return drop_unenforceable_numbers(value, probe, notes, path)
    return value

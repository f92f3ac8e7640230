"""Rewriting a client's JSON Schema into one the grammar backend compiles, never narrower.

* Annotations and keywords that constrain nothing are dropped silently (``title``, ``$schema``,
  ``propertyNames: {"type": "string"}``, ``additionalProperties: {}``, an unknown keyword, a
  ``format`` the backend does not enforce: formats are annotations by default).
* A keyword the backend cannot enforce is dropped and *noted* (a relaxation: the fence then
  admits a superset of what the schema admits), as is a ``pattern`` that is too long or that the
  backend cannot compile, and a ``$ref`` outside the document.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import attrs

from kvgate.plugins.json_schema.keywords import (
    ANNOTATIONS, COMPANIONS, KNOWN, SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_VALUED, is_trivial, string_keys_only,
)


@attrs.define
class Rules:
    """What the backend enforces: ``unsupported`` keywords, known ``formats`` (None: all), and
    ``pattern_error(pattern)`` -> why it cannot compile, or ''."""

    unsupported: frozenset = frozenset()
    formats: Optional[frozenset] = None
    max_pattern_chars: int = 4096
    pattern_error: Callable[[str], str] = lambda pattern: ""
    notes: list = attrs.field(factory=list)

    def relax(self, keyword: str, path: str, why: str = "not enforced") -> None:
        self.notes.append(f"{keyword} at {path or '/'} {why}")


def normalize(schema: Any, rules: Rules, path: str = "") -> Any:
    """A copy of ``schema`` rewritten for ``rules``; relaxations are appended to ``rules.notes``."""
    if isinstance(schema, bool) or not isinstance(schema, dict):
        return schema
    dropped = {companion for key, companions in COMPANIONS.items() if key in schema and key in rules.unsupported
               for companion in companions}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ANNOTATIONS or key not in KNOWN or key in dropped or _no_op(key, value, rules):
            continue
        if key in rules.unsupported:
            rules.relax(key, path)
            continue
        kept = _keyword(key, value, rules, f"{path}/{key}")
        if kept is not _DROP:
            out[key] = kept
    return out


_DROP = object()


def _no_op(key: str, value: Any, rules: Rules) -> bool:
    if key == "propertyNames":
        return string_keys_only(value)
    if key in ("additionalProperties", "items", "unevaluatedProperties", "unevaluatedItems"):
        return is_trivial(value)
    if key == "format":
        return rules.formats is not None and value not in rules.formats
    return False


def _keyword(key: str, value: Any, rules: Rules, path: str) -> Any:
    parent = path.rsplit("/", 1)[0]
    if key == "pattern":
        return _pattern(value, rules, parent)
    if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
        rules.relax("$ref", parent, f"to {str(value)[:80]!r} not resolved (any value allowed)")
        return _DROP
    if key in SCHEMA_MAPS and isinstance(value, dict):
        return {name: normalize(sub, rules, f"{path}/{name}") for name, sub in value.items()}
    if (key in SCHEMA_LISTS or key == "items") and isinstance(value, list):
        return [normalize(sub, rules, f"{path}/{i}") for i, sub in enumerate(value)]
    if key in SCHEMA_VALUED:
        return normalize(value, rules, path)
    return value


def _pattern(pattern: Any, rules: Rules, path: str) -> Any:
    if not isinstance(pattern, str):
        return _DROP
    if len(pattern) > rules.max_pattern_chars:
        rules.relax("pattern", path, f"of {len(pattern)} characters not enforced (over {rules.max_pattern_chars})")
        return _DROP
    error = rules.pattern_error(pattern)
    if error:
        rules.relax("pattern", path, f"not enforced ({error[:160]})")
        return _DROP
    return pattern

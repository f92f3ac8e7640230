"""JSON Schema preparation for fences: tool parameters and response formats.

Inside a string value no markup of the dialect may appear (a ``</tool_call>`` inside an argument
would end the call for every parser downstream): :func:`exclude_markup` adds a ``pattern`` that
rejects those literals to every free string of the schema. The pattern is an ordinary regular
expression built from a trie of the literals (no look-around), so any engine can compile it.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Iterable, Optional

from kvgate.core.types import Tool

_SKIP_KEYS = {"const", "enum", "default", "examples", "pattern", "format"}
_CLASS_SPECIAL = set("\\]^-[/")
_OUTSIDE_SPECIAL = set("\\.+*?()|[]{}^$#&-~/")


def tool_parameters(tool: Tool) -> dict[str, Any]:
    """The arguments schema of a tool, as an object schema."""
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    schema = copy.deepcopy(schema)
    schema.setdefault("type", "object")
    return schema


def _outside(ch: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or ("\\" + ch if ch in _OUTSIDE_SPECIAL else ch)


def _inside(ch: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or ("\\" + ch if ch in _CLASS_SPECIAL else ch)


def minimal_literals(literals: Iterable[str]) -> list[str]:
    """The literals without those that contain another one (excluding the shorter suffices)."""
    texts = sorted({t for t in literals if t}, key=len)
    kept: list[str] = []
    for text in texts:
        if not any(k in text for k in kept):
            kept.append(text)
    return sorted(kept)


def avoid_pattern(literals: Iterable[str], anchored: bool = True) -> Optional[str]:
    """A regex matching exactly the strings that contain none of ``literals``.

    Needs every literal to start with one character that appears nowhere else in them (true of
    markup: ``<``); returns None otherwise. Plain regex, no negation: cheap for any engine.
    """
    texts = minimal_literals(literals)
    if not texts:
        return None
    first = texts[0][0]
    if any(t[0] != first or first in t[1:] or len(t) < 2 for t in texts):
        return None
    tails = [t[1:] for t in texts]
    prefixes = sorted({tail[:i] for tail in tails for i in range(len(tail))}
                      - {p for p in tails})
    prefixes = [p for p in prefixes if not any(p.startswith(t) for t in tails)]
    escapes, partial = [], []
    for prefix in prefixes:
        nexts = sorted({tail[len(prefix)] for tail in tails if tail.startswith(prefix) and len(tail) > len(prefix)})
        stopped = "".join(_inside(c) for c in [first] + nexts)
        body = "".join(_outside(c) for c in prefix)
        escapes.append(f"{body}[^{stopped}]")
        partial.append(body)
    lead, stop = _outside(first), _inside(first)
    partials = "|".join(p for p in partial if p)
    after = f"(?:{'|'.join(escapes)})[^{stop}]*" + (f"|{partials}" if partials else "")
    body = f"[^{stop}]*(?:{lead}(?:{after})?)*"
    return f"^{body}$" if anchored else body


def exclude_markup(schema: Any, literals: Iterable[str]) -> Any:
    """A copy of ``schema`` whose free strings may not contain any of ``literals``."""
    pattern = avoid_pattern(literals)
    if pattern is None:
        return copy.deepcopy(schema)
    return _with_pattern(copy.deepcopy(schema), pattern)


def _is_free_string(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return "string" in kinds and not (_SKIP_KEYS & node.keys())


def _with_pattern(node: Any, pattern: str) -> Any:
    if isinstance(node, list):
        return [_with_pattern(item, pattern) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        out[key] = value if key in _SKIP_KEYS else _with_pattern(value, pattern)
    if _is_free_string(out):
        out["pattern"] = pattern
    return out


def is_string_schema(schema: Any) -> bool:
    """True when the schema only admits strings (optionally null): the value is written raw."""
    if not isinstance(schema, dict) or not schema:
        return False
    kind = schema.get("type")
    if isinstance(kind, list):
        return [k for k in kind if k != "null"] == ["string"]
    if kind == "string":
        return True
    enum = schema.get("enum")
    return kind is None and isinstance(enum, list) and bool(enum) and all(isinstance(i, str) for i in enum)


def properties(tool: Tool) -> list[tuple[str, Any, bool]]:
    """(name, schema, required) of each declared parameter, in declared order."""
    params = tool_parameters(tool)
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    return [(name, with_definitions(schema, params), name in required) for name, schema in props.items()
            if isinstance(name, str)]


def with_definitions(schema: Any, root: dict[str, Any]) -> Any:
    """A parameter's schema carrying the root's ``$defs`` / ``definitions`` when it refers to them,
    so it compiles on its own (dialects that write each parameter separately)."""
    if not isinstance(schema, dict) or '"$ref"' not in json.dumps(schema):
        return schema
    carried = {key: root[key] for key in ("$defs", "definitions") if isinstance(root.get(key), dict)}
    return {**carried, **schema} if carried else schema

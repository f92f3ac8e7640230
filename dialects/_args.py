"""Arguments helpers shared by the dialects: tool lookup, schema typing and raw JSON members.

``ToolCall.arguments`` is the JSON text exactly as the model produced it. Dialects that write one
tag per argument (GLM, DSML) split that text into members keeping each value's raw text, so a
non-string value renders back byte for byte (``{"unit":"C"}`` stays without a space), and build
the arguments text from parsed tags the same way (``{"k": RAW, "k2": "escaped string"}``).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from kvgate.core.types import Tool


def dumps(value: Any) -> str:
    """JSON as the reference templates write it (HF ``tojson``: non-ASCII kept, default separators)."""
    return json.dumps(value, ensure_ascii=False)


def quote(text: str) -> str:
    """A JSON string literal for ``text`` (escaping is per character, so chunks can be quoted alone)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def openai_tool(tool: Tool) -> dict[str, Any]:
    """The OpenAI function object of a tool, named as the model sees it."""
    function: dict[str, Any] = {"name": tool.qualified_name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = tool.parameters
    return function


class ToolIndex:
    """Resolves the name the model wrote to a request tool (flattened ``namespace__name``)."""

    def __init__(self, tools: list[Tool]):
        self.tools = {tool.qualified_name: tool for tool in tools}

    def resolve(self, written: str) -> tuple[bool, Optional[Tool]]:
        """(known, tool): without request tools every name is accepted."""
        if not self.tools:
            return True, None
        tool = self.tools.get(written)
        return tool is not None, tool


def param_schema(tool: Optional[Tool], key: str) -> Optional[dict[str, Any]]:
    if tool is None:
        return None
    props = tool.parameters.get("properties") or {}
    schema = props.get(key)
    return schema if isinstance(schema, dict) else None


def is_string_schema(schema: Optional[dict[str, Any]]) -> bool:
    """True when the schema only admits strings (optionally null): raw text is the value."""
    if not schema:
        return False
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds == ["string"]
    if kind == "string":
        return True
    enum = schema.get("enum")
    if kind is None and isinstance(enum, list) and enum:
        return all(isinstance(item, str) for item in enum)
    return False


def typed_value(raw: str, schema: Optional[dict[str, Any]]) -> str:
    """JSON text of an untyped argument value: raw JSON unless the schema says string.

    A value that is not JSON (or has surrounding whitespace) stays a string, so nothing is lost.
    """
    if is_string_schema(schema) or raw != raw.strip() or not raw:
        return '"' + quote(raw) + '"'
    try:
        json.loads(raw)
    except ValueError:
        return '"' + quote(raw) + '"'
    return raw


def member_json(key: str, value_json: str) -> str:
    return '"' + quote(key) + '": ' + value_json


def object_json(members: list[str]) -> str:
    return "{" + ", ".join(members) + "}"


def raw_members(arguments: str) -> list[tuple[str, str]]:
    """(key, raw value text) of a JSON object's members, in order, raw text untouched.

    Raises ValueError when ``arguments`` is not a JSON object.
    """
    text = arguments.strip() or "{}"
    decoder = json.JSONDecoder()
    if not text.startswith("{"):
        raise ValueError("arguments are not a JSON object")
    members, pos = [], _skip(text, 1)
    if text[pos:pos + 1] == "}":
        pos += 1
    else:
        while True:
            key, pos = decoder.raw_decode(text, pos)
            pos = _skip(text, pos)
            if not isinstance(key, str) or text[pos:pos + 1] != ":":
                raise ValueError("malformed member in arguments")
            start = _skip(text, pos + 1)
            _, end = decoder.raw_decode(text, start)
            members.append((key, text[start:end]))
            pos = _skip(text, end)
            if text[pos:pos + 1] == "}":
                pos += 1
                break
            if text[pos:pos + 1] != ",":
                raise ValueError("malformed separator in arguments")
            pos = _skip(text, pos + 1)
    if text[pos:].strip():
        raise ValueError("trailing text after arguments object")
    return members


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def is_json_string(raw: str) -> bool:
    return raw.startswith('"')


def string_value(raw: str) -> str:
    return json.loads(raw)


def history_members(arguments: str, where: str) -> list[tuple[str, str]]:
    """``raw_members`` for a call replayed in history: a clear request error when not an object."""
    from kvgate.core.errors import InvalidRequest

    try:
        return raw_members(arguments)
    except ValueError as exc:
        raise InvalidRequest(f"{where}: tool call arguments must be a JSON object ({exc})",
                             param="messages") from None


def wire_value(raw: str) -> tuple[bool, str]:
    """(is_string, text written on the wire) of one raw member value."""
    if is_json_string(raw):
        return True, string_value(raw)
    return False, raw


class ArgsBuilder:
    """Builds ``{"k": value, ...}`` from per-argument tags; each method returns the delta text."""

    def __init__(self) -> None:
        self.text = ""
        self.keys: set[str] = set()
        self.whole_object = False

    def open(self, key: str) -> str:
        return self._add(("{" if not self.keys else ", ") + '"' + quote(key) + '": ', key)

    def _add(self, delta: str, key: str = "") -> str:
        if key:
            self.keys.add(key)
        self.text += delta
        return delta

    def add(self, delta: str) -> str:
        return self._add(delta)

    def whole(self, text: str) -> str:
        """The arguments are ``text``, one JSON object read in one piece (nothing opened before)."""
        self.whole_object = True
        return self._add(text)

    def close(self) -> str:
        if self.whole_object:
            return ""
        return self._add("}" if self.keys else "{}")

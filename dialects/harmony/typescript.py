"""The developer message's ``# Tools`` section: each function tool as the TypeScript-like
declaration openai-harmony writes (``type NAME = (_: {...}) => any;`` in ``namespace functions``).

The rules below are openai-harmony 0.0.8's, read off its renderer and checked against it in
tests/dialects/test_harmony.py:

* A tool: its description as ``// LINE`` lines (none when empty), then
  ``'type NAME = (_: ' + TYPE(parameters, '') + ') => any;\\n\\n'``.
* TYPE(schema, I): ``oneOf`` -> a union, one ``'\\n' + I + ' | ' + TYPE(variant, I + '   ')`` per
  variant (``' | null'`` added for ``nullable``, then ``' // '`` + description and
  ``default: …``; the first variant's description is left out when the schema holding the
  ``oneOf`` has one); a ``type`` list -> the names joined by ``' | '`` (integer -> number); ``object``
  -> its description as ``I + '// ' + text + '\\n'``, then ``'{\\n'``, its properties at indent I and
  ``I + '}'``; ``string`` -> its string enum values quoted and joined, else ``string``; ``number`` /
  ``integer`` -> ``number``; ``boolean``; ``array`` -> ``TYPE(items, I) + '[]'`` or ``Array<any>``;
  anything else (``anyOf``, ``$ref``, ``const``, an enum without a type) -> ``any``.
* A property at indent I: comment lines (``title`` then ``//``, the description verbatim,
  ``Examples:`` with each string example; a ``oneOf`` property's description after them), then ``I + KEY + '?'`` (no ``?`` when required) and
  ``': ' + TYPE(value, I + '    ')`` + ``' | null'`` when ``nullable`` + ``','`` + ``' // default: …'``
  + ``'\\n'``. A ``oneOf`` property puts its default in a comment line and is written
  ``KEY?:`` + the union at indent I + ``'\\n' + I + ',\\n'``.
* A default is quoted when it is a string of a property without an enum (no escaping), written bare
  when it is a string of one with an enum, compact JSON otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from kvgate.core.types import Tool

HEAD, TAIL = "# Tools\n\n## functions\n\nnamespace functions {\n\n", "} // namespace functions"


def tools_section(tools: list[Tool]) -> str:
    return HEAD + "".join(declaration(tool) for tool in tools) + TAIL


def declaration(tool: Tool) -> str:
    doc = "".join(f"// {line}\n" for line in rust_lines(tool.description or ""))
    return f"{doc}type {tool.qualified_name} = (_: {ts_type(tool.parameters, '')}) => any;\n\n"


def rust_lines(text: str) -> list[str]:
    """``str::lines`` of Rust: split at ``\\n``, a trailing ``\\r`` dropped, no empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def ts_type(schema: Any, indent: str) -> str:
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("oneOf"), list):
        return union(schema["oneOf"], indent, has_text(schema, "description"))
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if k == "integer" else k for k in kind if isinstance(k, str)]
        return " | ".join(names) if names else "any"
    if kind == "object":
        return object_type(schema, indent)
    if kind == "string":
        values = [v for v in listed(schema, "enum") if isinstance(v, str)]
        return " | ".join(f'"{v}"' for v in values) if values else "string"
    if kind == "array":
        return ts_type(schema["items"], indent) + "[]" if "items" in schema else "Array<any>"
    return {"number": "number", "integer": "number", "boolean": "boolean"}.get(kind, "any")


def union(variants: list, indent: str, described: bool) -> str:
    """The ``oneOf`` variants; a described holder's description stands for its first variant's."""
    out = ""
    for position, variant in enumerate(variants):
        out += f"\n{indent} | " + nullable(variant, ts_type(variant, indent + "   "))
        variant = variant if isinstance(variant, dict) else {}
        notes = [variant["description"]] if has_text(variant, "description") and not (described and position == 0) else []
        notes += [default_note(variant)] if "default" in variant else []
        out += f" // {' '.join(notes)}" if notes else ""
    return out


def object_type(schema: dict, indent: str) -> str:
    out = f"{indent}// {schema['description']}\n{{\n" if has_text(schema, "description") else "{\n"
    properties = schema.get("properties")
    required = listed(schema, "required")
    for key, value in (properties.items() if isinstance(properties, dict) else ()):
        out += property_lines(key, value if isinstance(value, dict) else {}, key in required, indent)
    return out + indent + "}"


def property_lines(key: str, value: dict, required: bool, indent: str) -> str:
    mark = "" if required else "?"
    if isinstance(value.get("oneOf"), list):
        head = f"{indent}{key}{mark}:" + union(value["oneOf"], indent, has_text(value, "description"))
        return comments(value, indent, True) + head + f"\n{indent},\n"
    line = f"{indent}{key}{mark}: " + nullable(value, ts_type(value, indent + "    ")) + ","
    return comments(value, indent, False) + line + (f" // {default_note(value)}" if "default" in value else "") + "\n"


def comments(value: dict, indent: str, one_of: bool) -> str:
    """The comment lines above a property: title, description, examples; a ``oneOf`` property has
    its description after the examples and its default last."""
    described = f"{indent}// {value['description']}\n" if has_text(value, "description") else ""
    out = f"{indent}// {value['title']}\n{indent}//\n" if has_text(value, "title") else ""
    out += "" if one_of else described
    if listed(value, "examples"):
        out += f"{indent}// Examples:\n" + "".join(f'{indent}// - "{e}"\n' for e in listed(value, "examples")
                                                    if isinstance(e, str))
    if one_of:
        out += described + (f"{indent}// {default_note(value)}\n" if "default" in value else "")
    return out


def nullable(schema: Any, text: str) -> str:
    marked = isinstance(schema, dict) and schema.get("nullable") is True
    return text + " | null" if marked and "null" not in text else text


def default_note(schema: dict) -> str:
    value = schema["default"]
    if isinstance(value, str):
        return f"default: {value}" if listed(schema, "enum") else f'default: "{value}"'
    return "default: " + json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def has_text(schema: dict, key: str) -> bool:
    return isinstance(schema.get(key), str)


def listed(schema: dict, key: str) -> list:
    value = schema.get(key)
    return value if isinstance(value, list) else []

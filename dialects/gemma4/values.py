"""Gemma 4 argument values on the wire, both ways.

Written exactly as Gemma 4's chat template writes a call whose arguments are a mapping: members in
``dictsort`` order (keys compared case-insensitively, ties in their order), ``key:value`` with
bare keys, joined by ``','``; a value by the template's ``format_argument``: a string is ``<|"|>`` +
its raw text + ``<|"|>`` (no escaping; it cannot hold ``<|"|>``), ``true`` / ``false``, an object
``{key:value,...}`` (sorted the same way), an array ``[value,...]``, anything else Python's ``str``
of the JSON value (a number as ``json.dumps`` writes it, null as ``None``).

Read: the same, and leniently JSON's own spellings inside (a ``"``-quoted string or key) and
``null`` / ``True`` / ``False``. A value is returned as its JSON text (``json.dumps``, non-ASCII
kept); a top-level number keeps the text the model wrote.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvgate.dialects._args import dumps, history_members, member_json, object_json

QUOTE = '<|"|>'
BARE = re.compile(r"[^,\]}\s]+")
WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def render_arguments(name: str, arguments: str) -> str:
    """``key:value,...`` of a call's JSON ``arguments``, as the template writes them."""
    values = {key: json.loads(raw) for key, raw in history_members(arguments, f"tool call {name!r}")}
    return ",".join(f"{key}:{format_argument(value, escape_keys=False)}" for key, value in dictsort(values))


def dictsort(mapping: dict) -> list[tuple[Any, Any]]:
    """Jinja's ``dictsort``: items by key, strings compared case-insensitively, a stable sort."""
    return sorted(mapping.items(), key=lambda item: item[0].lower() if isinstance(item[0], str) else item[0])


def format_argument(value: Any, escape_keys: bool = True) -> str:
    """The template's ``format_argument`` macro (``escape_keys``: object keys in ``<|"|>``)."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        members = (f"{QUOTE + str(k) + QUOTE if escape_keys else k}:{format_argument(v, escape_keys)}"
                   for k, v in dictsort(value))
        return "{" + ",".join(members) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_argument(item, escape_keys) for item in value) + "]"
    return str(value)


class WireError(ValueError):
    """The body of a call is not Gemma 4 argument syntax."""


def parse_arguments(body: str) -> tuple[str, list[str]]:
    """(JSON object text, duplicate keys) of a call body ``key:value,...`` (the braces removed)."""
    reader = Reader(body)
    members, seen, duplicates = [], set(), []
    while reader.pos < len(body):
        key = reader.key()
        raw = reader.member_value()
        if key in seen:
            duplicates.append(key)
            continue
        seen.add(key)
        members.append(member_json(key, raw))
        if reader.pos < len(body):
            reader.literal(",")
    return object_json(members), duplicates


class Reader:
    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def space(self) -> None:
        while self.text[self.pos:self.pos + 1] in (" ", "\n", "\t", "\r") and self.pos < len(self.text):
            self.pos += 1

    def literal(self, lit: str) -> None:
        self.space()
        if not self.text.startswith(lit, self.pos):
            raise WireError(f"expected {lit!r} at {self.text[self.pos:self.pos + 20]!r}")
        self.pos += len(lit)

    def key(self) -> str:
        self.space()
        if self.text.startswith(QUOTE, self.pos) or self.text.startswith('"', self.pos):
            key = self.string()
        else:
            end = self.text.find(":", self.pos)
            if end <= self.pos:
                raise WireError(f"expected a key at {self.text[self.pos:self.pos + 20]!r}")
            key, self.pos = self.text[self.pos:end], end
        self.literal(":")
        return key

    def string(self) -> str:
        if self.text.startswith(QUOTE, self.pos):
            end = self.text.find(QUOTE, self.pos + len(QUOTE))
            if end < 0:
                raise WireError("unclosed <|\"|> string")
            value, self.pos = self.text[self.pos + len(QUOTE):end], end + len(QUOTE)
            return value
        try:
            value, self.pos = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise WireError(f"bad string: {exc}") from None
        return value

    def member_value(self) -> str:
        """A top-level value's JSON text (a number keeps its text)."""
        match = BARE.match(self.text, self.pos)
        if match and not self.text.startswith(QUOTE, self.pos) and self.text[self.pos] not in '{["\'':
            self.pos = match.end()
            return scalar_json(match.group())
        return dumps(self.value())

    def value(self) -> Any:
        self.space()
        ch = self.text[self.pos:self.pos + 1]
        if self.text.startswith(QUOTE, self.pos) or ch == '"':
            return self.string()
        if ch and ch in "{[":
            return self.container(ch)
        match = BARE.match(self.text, self.pos)
        if not match:
            raise WireError(f"expected a value at {self.text[self.pos:self.pos + 20]!r}")
        self.pos = match.end()
        return json.loads(scalar_json(match.group()))

    def container(self, opening: str) -> Any:
        closing = "}" if opening == "{" else "]"
        self.pos += 1
        out: Any = {} if opening == "{" else []
        while not (self.space() or self.text.startswith(closing, self.pos)):
            if self.pos >= len(self.text):
                raise WireError(f"unclosed {opening}")
            if out:
                self.literal(",")
            if opening == "{":
                key = self.key()
                out[key] = self.value()
            else:
                out.append(self.value())
        self.pos += 1
        return out


def scalar_json(text: str) -> str:
    if text in WORDS:
        return json.dumps(WORDS[text])
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise WireError(f"{text!r} is not a value") from None
    if isinstance(value, (dict, list, str)):
        raise WireError(f"{text!r} is not a value")
    return text

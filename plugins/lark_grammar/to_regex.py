"""A non-recursive Lark grammar -> one regular expression matching the same texts.

Custom tools (Codex's ``exec``, ``apply_patch``) define their input with small Lark grammars: rules
and terminals built from string and regex literals, ``|``, ``?``, ``*``, ``+``, ``~ n..m``, groups,
``[optional]`` parts and ``"a".."z"`` ranges. Without recursion such a grammar is regular, so it
becomes a JSON-schema ``pattern`` any dialect's fence enforces. The regex is written in the
syntax Python's ``re`` and Rust's ``regex`` share. Refused with a :class:`GrammarError` that
says why: recursion, ``%ignore`` / ``%declare`` / templates, an unknown ``%import``, regex flags
other than ``i`` / ``s``, look-around and back-references, and a result over ``MAX_REGEX_CHARS``.
"""

from __future__ import annotations

import ast
import re

from kvgate.core.fence.custom import MAX_REGEX_CHARS, UNSUPPORTED_REGEX, GrammarError
from kvgate.plugins.lark_grammar.tokens import Token, statements

_META = set("\\.+*?()|[]{}^$#&-~")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f", "\v": "\\v"}


def escape(text: str) -> str:
    return "".join(_NAMED.get(c) or ("\\" + c if c in _META else c) for c in text)


def lark_to_regex(grammar: str) -> str:
    """The regex (unanchored) of ``grammar``'s ``start`` rule."""
    definitions = statements(grammar)
    if "start" not in definitions:
        raise GrammarError("the Lark grammar has no 'start' rule")
    regex = _Translator(definitions).name("start")
    if len(regex) > MAX_REGEX_CHARS:
        raise GrammarError(f"the Lark grammar is too large to enforce ({len(regex)} regex characters, "
                           f"over {MAX_REGEX_CHARS})")
    return regex


class _Translator:
    def __init__(self, definitions: dict[str, list[Token]]):
        self.definitions = definitions
        self.done: dict[str, str] = {}
        self.open: list[str] = []

    def name(self, name: str) -> str:
        if name in self.done:
            return self.done[name]
        if name in self.open:
            raise GrammarError(f"the Lark grammar is recursive ({' -> '.join(self.open + [name])}); "
                               "only non-recursive grammars can be enforced")
        if name not in self.definitions:
            raise GrammarError(f"the Lark grammar uses {name!r}, which it does not define")
        self.open.append(name)
        tokens = self.definitions[name]
        regex, at = self.alternatives(tokens, 0)
        if at != len(tokens):
            raise GrammarError(f"unexpected {tokens[at].text!r} in the definition of {name!r}")
        self.open.pop()
        self.done[name] = regex
        return regex

    def alternatives(self, tokens: list[Token], at: int) -> tuple[str, int]:
        options = []
        while True:
            option, at = self.sequence(tokens, at)
            options.append(option)
            if at < len(tokens) and tokens[at].text == "->":  # an alias names the tree node only
                at += 2
            if at >= len(tokens) or tokens[at].text != "|":
                return (options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"), at
            at += 1

    def sequence(self, tokens: list[Token], at: int) -> tuple[str, int]:
        parts = []
        while at < len(tokens) and tokens[at].text not in ("|", ")", "]", "->"):
            atom, at = self.atom(tokens, at)
            parts.append(atom)
        return "".join(parts), at

    def atom(self, tokens: list[Token], at: int) -> tuple[str, int]:
        token = tokens[at]
        if token.text in ("(", "["):
            inner, at = self.alternatives(tokens, at + 1)
            close = ")" if token.text == "(" else "]"
            if at >= len(tokens) or tokens[at].text != close:
                raise GrammarError(f"unbalanced {token.text!r} in the Lark grammar")
            body, at = f"(?:{inner})", at + 1
            if close == "]":
                body += "?"
        elif token.kind == "string":
            body, at = self.string(tokens, at)
        elif token.kind == "regex":
            body, at = regex_literal(token.text), at + 1
        elif token.kind == "name":
            body, at = f"(?:{self.name(token.text)})", at + 1
        else:
            raise GrammarError(f"unexpected {token.text!r} in the Lark grammar")
        return self.suffix(body, tokens, at)

    def string(self, tokens: list[Token], at: int) -> tuple[str, int]:
        text = string_literal(tokens[at].text)
        if at + 2 < len(tokens) and tokens[at + 1].text == ".." and tokens[at + 2].kind == "string":
            high = string_literal(tokens[at + 2].text)
            if len(text) != 1 or len(high) != 1:
                raise GrammarError('a Lark range needs one-character ends ("a".."z")')
            return f"[{escape(text)}-{escape(high)}]", at + 3
        if tokens[at].text.endswith("i"):
            return f"(?i:{escape(text)})", at + 1
        return f"(?:{escape(text)})", at + 1

    def suffix(self, body: str, tokens: list[Token], at: int) -> tuple[str, int]:
        if at < len(tokens) and tokens[at].text in ("?", "*", "+"):
            return body + tokens[at].text, at + 1
        if at + 1 < len(tokens) and tokens[at].text == "~" and tokens[at + 1].kind == "number":
            low = high = tokens[at + 1].text
            at += 2
            if at + 1 < len(tokens) and tokens[at].text == ".." and tokens[at + 1].kind == "number":
                high, at = tokens[at + 1].text, at + 2
            return f"{body}{{{low},{high}}}", at
        return body, at


def string_literal(text: str) -> str:
    try:
        return ast.literal_eval(text.rstrip("i"))
    except (ValueError, SyntaxError):
        raise GrammarError(f"bad string literal {text} in the Lark grammar") from None


def regex_literal(text: str) -> str:
    """A ``/body/flags`` terminal as a group: ``\\/`` unescaped, flags ``i`` and ``s`` kept inline."""
    end = text.rindex("/")
    body, flags = text[1:end], text[end + 1:]
    if set(flags) - set("is"):
        raise GrammarError(f"regex flags {flags!r} in {text} are not supported (only 'i' and 's')")
    body = re.sub(r"\\(.)", lambda m: "/" if m.group(1) == "/" else m.group(0), body)
    if UNSUPPORTED_REGEX.search(body):
        raise GrammarError(f"the regex {text} uses look-around or a back-reference, which cannot be enforced")
    return f"(?{flags}:{body})" if flags else f"(?:{body})"

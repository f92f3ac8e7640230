"""Reading a Lark grammar's text into definitions: name -> the tokens of its expansions.

Comments (``//`` to the end of a line) are dropped, ``|`` lines continue the definition above,
rule modifiers (``?rule``, ``!rule``) and terminal priorities (``NAME.2``) are dropped, and
``%import common.NAME`` (optionally ``-> ALIAS``) defines the few common terminals in ``COMMON``.
Anything else the regex translation cannot honour is refused (see :mod:`.to_regex`).
"""

from __future__ import annotations

import re

import attrs

from kvgate.core.fence.custom import GrammarError

COMMON = {  # lark's common.lark terminals, as regexes in Lark syntax
    "DIGIT": "/[0-9]/", "HEXDIGIT": "/[a-fA-F0-9]/", "INT": "/[0-9]+/", "SIGNED_INT": "/[+-]?[0-9]+/",
    "LCASE_LETTER": "/[a-z]/", "UCASE_LETTER": "/[A-Z]/", "LETTER": "/[a-zA-Z]/", "WORD": "/[a-zA-Z]+/",
    "CNAME": "/[_a-zA-Z][_a-zA-Z0-9]*/", "WS_INLINE": "/[ \\t]+/", "WS": "/[ \\t\\f\\r\\n]+/",
    "NEWLINE": "/(\\r?\\n)+/", "CR": "/\\r/", "LF": "/\\n/", "ESCAPED_STRING": '/"([^"\\\\]|\\\\.)*"/',
}
_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+) | (?P<comment>//[^\n]*) | (?P<newline>\n)
  | (?P<string>"(?:\\.|[^"\\\n])*"i?) | (?P<regex>/(?:\\.|[^/\\\n])+/[a-z]*)
  | (?P<directive>%[a-z]+) | (?P<number>[0-9]+) | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_0-9]+)*)
  | (?P<op>->|\.\.|[:|()\[\]?!*+~{},.-])
""", re.X)


@attrs.frozen
class Token:
    kind: str
    text: str


def _tokens(grammar: str) -> list[Token]:
    out, at = [], 0
    while at < len(grammar):
        found = _TOKEN.match(grammar, at)
        if found is None:
            raise GrammarError(f"cannot read the Lark grammar at {grammar[at:at + 20]!r}")
        kind = found.lastgroup
        if kind not in ("space", "comment"):
            out.append(Token(kind, found.group()))
        at = found.end()
    return out


def _lines(tokens: list[Token]) -> list[list[Token]]:
    """Logical lines: a line that starts with ``|`` continues the one above."""
    lines: list[list[Token]] = [[]]
    for token in tokens:
        if token.kind == "newline":
            lines.append([])
        elif not lines[-1] and token.text == "|" and len(lines) > 1:
            lines.pop()
            lines[-1].append(token)
        else:
            lines[-1].append(token)
    return [line for line in lines if line]


def statements(grammar: str) -> dict[str, list[Token]]:
    definitions: dict[str, list[Token]] = {}
    for line in _lines(_tokens(grammar)):
        if line[0].text in ("?", "!"):  # rule modifiers shape the tree only
            line = line[1:]
        head = line[0]
        if head.kind == "directive":
            definitions.update(_directive(line))
            continue
        if head.kind != "name" or len(line) < 2 or line[1].text not in (":", "{"):
            raise GrammarError(f"expected a definition ('name: ...') in the Lark grammar, got {head.text!r}")
        if line[1].text == "{":
            raise GrammarError(f"the Lark grammar's template {head.text!r} is not supported")
        name = head.text.split(".")[0]
        if name in definitions:
            raise GrammarError(f"the Lark grammar defines {name!r} twice")
        definitions[name] = line[2:]
    return definitions


def _directive(line: list[Token]) -> dict[str, list[Token]]:
    words = [token.text for token in line]
    if words[0] == "%import" and len(words) in (2, 4) and words[1].startswith("common."):
        name = words[1].split(".", 1)[1]
        alias = words[3] if len(words) == 4 and words[2] == "->" else name
        if name in COMMON and (len(words) == 2 or words[2] == "->"):
            return {alias: [Token("regex", COMMON[name])]}
    raise GrammarError(f"the Lark directive {' '.join(words)!r} is not supported (only %import of "
                       f"common terminals: {', '.join(sorted(COMMON))})")

"""Neutral grammar -> llguidance's Lark dialect (``%json``, lazy lexemes, ``&``/``~`` terminals,
parametric rules for any-order fields).

JSON values get compact-canonical separators (``", "`` and ``": "``, no free whitespace), the bytes
``json.dumps`` writes. Literals that contain an added token's text reference that token by id (so
the token is forced, never its spelling); ``strict`` names the tokens marked special, whose bytes
cannot occur as text (a text region may not end inside one). A plain added token inside a text
region's end stays its bytes, which the token also spells. A node object that occurs more than once
in the tree (a builder's shared subtree, e.g. a recursive value unrolled a few levels) is written
once, as a rule its occurrences name, so the grammar grows with the distinct nodes, not the paths.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import attrs

from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.schema import avoid_pattern
from kvgate.core.fence.grammar import Alt, AnyOrder, FreeText, Json, Lit, Node, Repeat, Seq, TextThen

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
MAX_ANY_ORDER_FIELDS = 60
_REGEX_SPECIAL = set("\\.+*?()|[]{}^$#&-~/")
_REGEX_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def rx_escape(text: str) -> str:
    return "".join(_REGEX_NAMED.get(c) or ("\\" + c if c in _REGEX_SPECIAL else c) for c in text)


def regex_body(pattern: str) -> str:
    """``pattern`` as the body of a ``/.../`` regex terminal (its slashes escaped)."""
    return re.sub(r"\\.|/", lambda m: "\\/" if m.group() == "/" else m.group(), pattern)


def lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


class LarkWriter:
    def __init__(self, special_texts: dict[str, int], strict: Optional[dict[str, int]] = None):
        self.specials = {text: i for text, i in special_texts.items() if text}
        self.strict = self.specials if strict is None else {t: i for t, i in strict.items() if t}
        self.rules: list[str] = []
        self.count = 0
        self.uses: dict[int, int] = {}
        self.written: dict[int, str] = {}

    def grammar(self, root: Node) -> str:
        self.uses = occurrences(root)
        start = self.expr(root)
        return "\n".join(["%llguidance {}", f"start: {start}"] + self.rules) + "\n"

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def expr(self, node: Node) -> str:
        if self.uses.get(id(node), 0) < 2 or isinstance(node, Lit):
            return self.written_expr(node)
        if id(node) not in self.written:
            text = self.written_expr(node)
            self.written[id(node)] = self.rule(text) if isinstance(node, (Seq, Alt)) else text
        return self.written[id(node)]

    def written_expr(self, node: Node) -> str:
        if isinstance(node, Lit):
            return self.literal(node.text)
        if isinstance(node, Seq):
            return " ".join(self.expr(item) for item in node.items) or '""'
        if isinstance(node, Alt):
            return "(" + " | ".join(self.expr(option) for option in node.options) + ")"
        if isinstance(node, Repeat):
            return self.repeat(node)
        if isinstance(node, Json):
            return self.json(node)
        if isinstance(node, FreeText):
            return self.terminal(self.free_text(node.excludes))
        if isinstance(node, TextThen):
            return self.text_then(node)
        if isinstance(node, AnyOrder):
            return self.any_order(node)
        raise FenceError(f"grammar node {type(node).__name__} is not supported by the lark writer")

    def literal(self, text: str) -> str:
        """A string literal, with special-token texts inside it referenced as tokens."""
        parts, rest = [], text
        while rest:
            hits = [(rest.find(s), s) for s in self.specials if s in rest]
            if not hits:
                parts.append(lark_string(rest))
                break
            pos, special = min(hits, key=lambda h: (h[0], -len(h[1])))
            if pos:
                parts.append(lark_string(rest[:pos]))
            parts.append(f"<[{self.specials[special]}]>")
            rest = rest[pos + len(special):]
        return " ".join(parts) or '""'

    def rule(self, body: str, options: str = "") -> str:
        name = self.fresh("r")
        self.rules.append(f"{name}{options}: {body}")
        return name

    def terminal(self, body: str) -> str:
        name = self.fresh("T")
        self.rules.append(f"{name}: {body}")
        return name

    def repeat(self, node: Repeat) -> str:
        item = self.rule(self.expr(node.item))
        if node.high is None:
            return f"{item}*" if node.low == 0 else (f"{item}+" if node.low == 1 else f"{item}{{{node.low},}}")
        if node.high == 0:
            return '""'
        return f"{item}{{{node.low},{node.high}}}"

    def json(self, node: Json) -> str:
        schema = node.schema
        if not isinstance(schema, dict):
            schema = {} if schema is True else schema
        schema = dict(schema)
        schema["x-guidance"] = dict(JSON_STYLE)
        return self.rule("%json " + json.dumps(schema, ensure_ascii=False))

    def free_text(self, excludes: tuple[str, ...]) -> str:
        texts = [e for e in dict.fromkeys(excludes) if e]
        if not texts:
            return "/(?s:.*)/"
        plain = avoid_pattern(texts, anchored=False)
        if plain is not None:  # a plain regex: negation is costly for the lexer (fuel per mask)
            return f"/{plain}/"
        banned = "|".join(rx_escape(t) for t in texts)
        return f"/(?s:.*)/ & ~/(?s:.*)({banned})(?s:.*)/"

    def text_then(self, node: TextThen) -> str:
        free = self.free_text(node.excludes + (node.end,))
        # with a pattern the text is exactly what it admits (empty only if it admits empty)
        optional = "" if node.pattern is not None else "?"
        if node.end in self.specials:  # the token cannot occur in text (its spelling is excluded)
            free = self.bounded(free, attrs.evolve(node, min_chars=0, max_chars=None))
            text = f"(({free}) & /(?s:.+{rx_escape(node.lead)})/)?" if node.lead else f"({free}){optional}"
            return self.rule(self.terminal(text + ' ""') + ' ' + self.literal(node.end))
        if any(s in node.end for s in self.strict):
            raise FenceError(f"the end {node.end!r} of a text region holds a special token inside "
                             f"other text; the llguidance backend cannot end text on it")
        free = self.bounded(free, node)
        if node.lead:
            head = f"(({free}) & /(?s:.+{rx_escape(node.lead)})/)?"
        else:
            head = f"({free}){optional}"
        token = self.terminal(f"{head} {lark_string(node.end)}")
        return self.rule(token, "[lazy]")

    @staticmethod
    def bounded(free: str, node: TextThen) -> str:
        """``free`` text within ``node``'s length bounds and pattern."""
        if node.min_chars or node.max_chars is not None:
            high = "" if node.max_chars is None else str(node.max_chars)
            free = f"({free}) & /(?s:.{{{node.min_chars},{high}}})/"
        if node.pattern is not None:
            free = f"({free}) & /{regex_body(node.pattern)}/"
        return free

    def any_order(self, node: AnyOrder) -> str:
        fields = sorted(node.fields, key=lambda f: not f.required)
        if len(fields) > MAX_ANY_ORDER_FIELDS:  # too many for one 64-bit parameter: keep the order given
            return " ".join(self.expr(f.body) if f.required else f"({self.expr(f.body)})?" for f in node.fields)
        required = sum(1 for f in fields if f.required)
        name = self.fresh("p")
        count = len(fields)
        if required:
            lines = [f'""  %if is_ones([0:{required}])']
        elif node.empty:
            lines = [f'""  %if bit_count_gt([0:{count}], 0)', f"{self.literal(node.empty)}  %if is_zeros([0:{count}])"]
        else:
            lines = ['""  %if true']
        for bit, field in enumerate(fields):
            body = self.rule(self.expr(field.body))
            lines.append(f"{body} {name}::set_bit({bit})  %if bit_clear({bit})")
        self.rules.append(f"{name}::_ : " + "\n    | ".join(lines))
        return f"{name}::0x0"


def occurrences(root: Node) -> dict[int, int]:
    """How many times each node object occurs in the tree rooted at ``root`` (a shared subtree's
    own children are counted once)."""
    counts: dict[int, int] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        counts[id(node)] = counts.get(id(node), 0) + 1
        if counts[id(node)] == 1:
            stack.extend(children(node))
    return counts


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Seq):
        return node.items
    if isinstance(node, Alt):
        return node.options
    if isinstance(node, Repeat):
        return (node.item,)
    if isinstance(node, AnyOrder):
        return tuple(field.body for field in node.fields)
    return ()


def to_lark(root: Node, special_texts: dict[str, int], strict: Optional[dict[str, int]] = None) -> str:
    return LarkWriter(special_texts, strict).grammar(root)

"""A small, engine-neutral grammar language that fences are written in.

Dialect grammar builders produce these nodes; a grammar backend (see :mod:`kvgate.core.fence.backend`)
compiles them for its engine. Every node matches text (bytes of UTF-8), never token ids: literals
that the tokenizer holds as special tokens are the backend's concern.

* ``Lit(text)``: exactly ``text``.
* ``Seq(items)``, ``Alt(options)``: concatenation and choice.
* ``Repeat(item, low, high)``: ``item`` repeated ``low``..``high`` times (``high`` None: unbounded).
* ``Json(schema)``: one JSON value valid against ``schema`` written the way ``json.dumps`` writes
  it by default (``", "`` and ``": "``, no other whitespace, declared property order), so a value
  re-renders byte for byte.
* ``FreeText(excludes)``: any text to the end of the output that contains none of ``excludes``.
* ``TextThen(end, excludes, lead)``: text containing none of ``excludes`` nor ``end``, then ``end``
  at its first occurrence. With ``lead``, the text is either empty or non-empty and ends with
  ``lead`` (a separator the dialect writes between content and a call). ``min_chars`` /
  ``max_chars`` bound the text's length in characters; ``pattern`` (a regex, unanchored syntax)
  is one the whole text must match.
* ``AnyOrder(fields)``: each field at most once, in any order; every ``required`` field must be
  present before the sequence may end; ``empty`` is written instead when no field is present.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Union

import attrs


@attrs.frozen
class Lit:
    text: str


@attrs.frozen(cache_hash=True)  # shared subtrees: each hashed once
class Seq:
    items: tuple["Node", ...]


@attrs.frozen(cache_hash=True)  # shared subtrees: each hashed once
class Alt:
    options: tuple["Node", ...]


@attrs.frozen(cache_hash=True)  # shared subtrees: each hashed once
class Repeat:
    item: "Node"
    low: int = 0
    high: Optional[int] = None


@attrs.frozen
class Json:
    schema_text: str  # canonical JSON text of the schema (hashable, stable cache key)

    @property
    def schema(self) -> Any:
        return json.loads(self.schema_text)


@attrs.frozen
class FreeText:
    excludes: tuple[str, ...] = ()


@attrs.frozen
class TextThen:
    end: str
    excludes: tuple[str, ...] = ()
    lead: str = ""
    min_chars: int = 0
    max_chars: Optional[int] = None
    pattern: Optional[str] = None


@attrs.frozen
class Field:
    body: "Node"
    required: bool = False


@attrs.frozen
class AnyOrder:
    fields: tuple[Field, ...]
    empty: str = ""  # the text written instead when no field is present


Node = Union[Lit, Seq, Alt, Repeat, Json, FreeText, TextThen, AnyOrder]


def seq(*items: Node) -> Node:
    """A sequence with adjacent literals merged, empty literals dropped, and a literal that
    precedes or follows a choice moved into each option (so no literal lexeme is a prefix of
    another one at the same position, which a greedy lexer could not split: ``END`` then
    (nothing | ``BEGIN ...``) then ``CLOSE`` is written (``END CLOSE`` | ``END BEGIN ... CLOSE``))."""
    out: list[Node] = []
    for item in items:
        parts = list(item.items) if isinstance(item, Seq) else [item]
        for part in parts:
            if isinstance(part, Lit) and not part.text:
                continue
            if out and isinstance(out[-1], Lit) and isinstance(part, Lit):
                out[-1] = Lit(out[-1].text + part.text)
            elif out and isinstance(out[-1], Lit) and isinstance(part, Alt):
                out[-1] = Alt(tuple(seq(out[-1], option) for option in part.options))
            elif out and isinstance(out[-1], Alt) and isinstance(part, Lit):
                out[-1] = Alt(tuple(seq(option, part) for option in out[-1].options))
            else:
                out.append(part)
    if not out:
        return Lit("")
    if len(out) == 1:
        return out[0]
    return Seq(tuple(out))


def alt(*options: Node) -> Node:
    unique = tuple(dict.fromkeys(options))
    return unique[0] if len(unique) == 1 else Alt(unique)


def json_node(schema: Any) -> Json:
    return Json(json.dumps(schema, sort_keys=False, ensure_ascii=False))


def literals_in(node: Node) -> list[str]:
    """Every literal text the grammar can force (for the tokenizer check)."""
    if isinstance(node, Lit):
        return [node.text]
    if isinstance(node, (Seq, Alt)):
        children = node.items if isinstance(node, Seq) else node.options
        return [text for child in children for text in literals_in(child)]
    if isinstance(node, Repeat):
        return literals_in(node.item)
    if isinstance(node, TextThen):
        return [node.end] + ([node.lead] if node.lead else [])
    if isinstance(node, AnyOrder):
        return [text for field in node.fields for text in literals_in(field.body)]
    return []

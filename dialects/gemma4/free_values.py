"""The fence grammar of a free value: one whose schema declares no structure (``{}``, no ``type``, an
object without ``properties``, an array without ``items``), written in Gemma 4's own syntax exactly as
the chat template's ``format_argument`` writes the value back once parsed, so a resent call renders
to the bytes the model generated.

A free value is a string ``<|"|>`` + raw text that opens none of the call markup + ``<|"|>``; a number
as :func:`.numbers.any_number` has it; ``true`` / ``false``; ``None``; an object ``{}`` or
``{`` + ``KEY:VALUE`` joined by ``','`` + ``}``; an array ``[]`` or ``[`` + values joined by ``','`` + ``]``;
no whitespace between. A KEY is written bare, as the template writes it: a word of characters other
than whitespace, ``:`` (where the parser ends a key), ``<`` (the markup), ``"`` (a JSON key to the
parser) and ``{}[],`` (so the budget's closer, which writes those, never runs on inside a key: it
finds ``:`` there). Containers nest ``DEPTH`` deep; inside the deepest only ``{}`` and ``[]``.

Not enforced, as no context-free grammar can: the template's ``dictsort`` order of an object's keys
(by ``key.lower()``) and their uniqueness. A value written out of order parses to the same mapping
and renders back sorted. (Ordering by first character is regular, but as one key choice per
character it made fences far slower to build and drive; it is left out.)
"""

from __future__ import annotations

from functools import lru_cache

from kvgate.core.fence.grammar import Lit, Node, Repeat, TextThen, alt, seq
from kvgate.dialects.gemma4.numbers import any_number
from kvgate.dialects.gemma4.values import QUOTE

DEPTH = 3  # levels of containers; each level is one shared object, so the grammar grows linearly
KEY_PATTERN = r'[^\s:<"{}\[\],]+'


@lru_cache(maxsize=64)  # one shared object per level: the grammar writer writes it once
def free_value(markup: tuple[str, ...], depth: int = DEPTH) -> Node:
    """Any value, containers nested up to ``depth`` deep; strings and keys open none of ``markup``."""
    if depth == 0:
        return sealed(alt(scalar(markup), Lit("{}"), Lit("[]")))
    inner = free_value(markup, depth - 1)
    return sealed(alt(scalar(markup), free_object(inner), free_array(inner)))


@lru_cache(maxsize=16)
def scalar(markup: tuple[str, ...]) -> Node:
    """A string, number, boolean or ``None`` (one object for every level)."""
    text = seq(Lit(QUOTE), TextThen(end=QUOTE, excludes=markup))
    return sealed(alt(text, any_number(), Lit("true"), Lit("false"), Lit("None")))


def sealed(choice: Node) -> Node:
    """``choice`` once: ``seq`` merges a neighbouring literal into a choice's options (a copy of the
    choice for each neighbour); it leaves a repeat whole, so a shared value stays one object."""
    return Repeat(choice, 1, 1)


def free_object(value: Node) -> Node:
    """``{}`` or ``{KEY:VALUE,...}`` with bare keys and ``value`` for every member."""
    return listed("{", seq(bare_key(), value), "}")


def free_array(item: Node) -> Node:
    return listed("[", item, "]")


def listed(opening: str, item: Node, closing: str) -> Node:
    """``opening + closing``, or items joined by ``','`` between them."""
    return alt(Lit(opening + closing), seq(Lit(opening), item, Repeat(seq(Lit(","), item), 0, None), Lit(closing)))


def bare_key() -> Node:
    """A key as the template writes it, then its ``:``."""
    return TextThen(end=":", pattern=KEY_PATTERN)

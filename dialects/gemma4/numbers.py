"""The fence grammar of a number written as Gemma 4's chat template writes it back: the template
prints the parsed JSON value with Python's ``str``, so ``2.50`` or ``1e5`` would come back as ``2.5``
and ``100000.0``. Without bounds in its schema a number is written the way ``str`` writes it for
ordinary magnitudes: an optional ``-``, digits without a leading zero (an integer any number of
them, a number up to 15), and for a number's fraction ``.`` + digits without a trailing zero (or
``.0``); not ``-0``. A schema with bounds keeps the JSON number grammar, which enforces them.
"""

from __future__ import annotations

from kvgate.core.fence.grammar import Lit, Node, Repeat, alt, json_node, seq

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
DIGITS = 15  # the digits a double keeps: past them str() writes another number


def number_node(schema: dict) -> Node:
    """An integer or number of ``schema`` (``type`` and its bounds are what it reads)."""
    if any(key in schema for key in BOUNDS):
        return json_node({key: schema[key] for key in ("type", *BOUNDS) if key in schema})
    nonzero = alt(*[Lit(str(d)) for d in range(1, 10)])
    digit = alt(Lit("0"), nonzero)
    if schema.get("type") == "integer":  # an int prints exactly at any length
        whole = seq(nonzero, Repeat(digit, 0, None))
        return alt(Lit("0"), whole, seq(Lit("-"), whole))
    positive = seq(nonzero, Repeat(digit, 0, DIGITS - 1))
    ending = seq(Repeat(digit, 0, DIGITS - 3), nonzero)
    # ".0..." or ".N...": no option a bare "." (a literal that prefixes another one, which a lexer cannot split)
    fraction = alt(seq(Lit(".0"), Repeat(ending, 0, 1)), seq(Lit("."), nonzero, Repeat(ending, 0, 1)))
    unsigned = seq(alt(Lit("0"), positive), Repeat(fraction, 0, 1))
    return alt(unsigned, seq(Lit("-"), positive, Repeat(fraction, 0, 1)), seq(Lit("-0"), fraction))

"""The fence grammar of a number written as Gemma 4's chat template writes it back: the template
prints the parsed JSON value with Python's ``str``, so ``2.50`` or ``1e5`` would come back as ``2.5``
and ``100000.0``. Without bounds in its schema a number is written the way ``str`` writes it: an
integer an optional ``-`` and digits without a leading zero, any number of them (not ``-0``); a
float (a ``number``) in ``str``'s fixed notation, which it uses from 1e-4 up to below 1e16: at most
15 digits, the whole part's and the fraction's (after ``0.`` the significant ones; a double keeps 15,
so ``str`` writes that decimal back), a ``.`` and digits without a trailing zero (or ``.0``), at most
three zeros after ``0.`` (smaller ``str`` writes as ``1e-05``).
A free value's number (:mod:`.free_values`) is either. A schema with bounds keeps the
JSON number grammar, which enforces them.
"""

from __future__ import annotations

from kvgate.core.fence.grammar import Lit, Node, Repeat, alt, json_node, seq

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
DIGITS = 15  # the digits a double keeps: past them str() writes another number
NONZERO = alt(*[Lit(str(d)) for d in range(1, 10)])
DIGIT = alt(Lit("0"), NONZERO)


def number_node(schema: dict) -> Node:
    """An integer or number of ``schema`` (``type`` and its bounds are what it reads)."""
    if any(key in schema for key in BOUNDS):
        return json_node({key: schema[key] for key in ("type", *BOUNDS) if key in schema})
    return integer_node() if schema.get("type") == "integer" else any_number()


def integer_node() -> Node:
    """An int as ``str`` writes it (exactly, at any length)."""
    whole = seq(NONZERO, Repeat(DIGIT, 0, None))
    return alt(Lit("0"), whole, seq(Lit("-"), whole))


def any_number() -> Node:
    """An int or a float as ``str`` writes them (the module docstring)."""
    more = [seq(Repeat(DIGIT, n, n), Repeat(fraction(DIGITS - 1 - n), 0, 1)) for n in range(DIGITS)]
    positive = seq(NONZERO, alt(Repeat(DIGIT, DIGITS, None), *more))  # past 15 digits an int only
    below_one = alt(seq(Lit(".0"), Repeat(seq(Repeat(Lit("0"), 0, 2), NONZERO, ending(DIGITS - 1)), 0, 1)),
                    seq(Lit("."), NONZERO, ending(DIGITS - 1)))
    # "0" then an optional fraction, "-0" then a required one: no literal option prefixes another
    return alt(seq(Lit("0"), Repeat(below_one, 0, 1)), positive, seq(Lit("-"), positive), seq(Lit("-0"), below_one))


def fraction(digits: int) -> Node:
    """``.0``, or ``.`` + 1..``digits`` digits ending in a non-zero one."""
    if digits == 0:
        return Lit(".0")
    return alt(seq(Lit(".0"), ending(digits - 1)), seq(Lit("."), NONZERO, ending(digits - 1)))


def ending(digits: int) -> Node:
    """Nothing, or up to ``digits`` digits ending in a non-zero one."""
    if digits == 0:
        return Lit("")
    return Repeat(seq(Repeat(DIGIT, 0, digits - 1), NONZERO), 0, 1)

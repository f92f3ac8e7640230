"""The built-in mask refiner ``canonical_split``: fenced text keeps the tokenizer's own split of it,
so the next turn's prompt re-tokenizes the output to the same ids and stays on the cached prefix
(:mod:`.canonicalizer`). Disabled, the model's own split of forced text is kept."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.canonical_split.canonicalizer import Canonicalizer


@hookimpl
def register_mask_refiners(register):
    register("canonical_split", Canonicalizer)

"""A compiled grammar's trial run before it is used: its first steps, as generation takes them.

llguidance compiles lexemes lazily, so a grammar can compile and still fail at its first mask: a
``pattern`` such as ``^z{1000000}$`` forces a million bytes, and once the forced tokens are
computed the lexer's shared state is past its limits (``LexerTooComplex``). Such a grammar is
refused at compile time -- a 400 -- instead of failing every request that uses it (a 500).
"""

from __future__ import annotations

import llguidance
import numpy as np

from kvgate.core.fence.mask import bitmask_words


def first_steps_error(template: llguidance.LLMatcher, vocab_size: int) -> str:
    """The engine's error for the first steps of copies of ``template`` (forced tokens, then the
    first mask of a copy that forced nothing), or ''."""
    mask = np.zeros(bitmask_words(vocab_size), dtype=np.int32)
    forcing = template.deep_copy()
    forcing.compute_ff_tokens()
    if not forcing.is_error():
        forcing.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    if forcing.is_error():
        return forcing.get_error()
    fresh = template.deep_copy()
    fresh.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    return fresh.get_error() if fresh.is_error() else ""

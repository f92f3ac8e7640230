"""Closing an open structure before the token budget runs out.

A call cut off by ``max_tokens`` is an invalid call, so near the end of the budget the fence asks
for a short way to a state where the output may end, and forces it once the remaining budget is
no longer than that path. The path is found greedily on a copy of the grammar state: the
dialect's closing tags first (``</arg_value>``), then tokens made of JSON closers (``"``, ``}``,
``]``), separators and short values, else the longest allowed token (most bytes of a forced
literal or a minimum length per token).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from kvgate.core.fence.mask import bitmask_words, unpack
from kvgate.core.fence.tokens import TokenizerInfo

MAX_PATH = 96
CLOSERS = set(b'"}]')
SEPARATORS = set(b'"}],: \n')
VALUES = {b"0", b"1", b"true", b"false", b"null", b'"', b"[", b"{", b"[]", b"{}", b'""'}


class Closer:
    """Finds closing paths for one tokenizer and one dialect's closing literals (stateless)."""

    def __init__(self, info: TokenizerInfo, closing_literals: list[str]):
        pieces = info.token_bytes()
        self.vocab = info.vocab_size
        self.literal_tokens = [info.encode(text) for text in closing_literals if text]
        self.lengths = np.array([len(p) if i not in info.special_ids else 0 for i, p in enumerate(pieces)])
        ranked = sorted(range(self.vocab), key=lambda i: -len(pieces[i]))
        real = [i for i in ranked if pieces[i] and i not in info.special_ids]
        self.closers = np.array([i for i in real if set(pieces[i]) <= CLOSERS], dtype=np.int64)
        self.separators = np.array([i for i in real if set(pieces[i]) <= SEPARATORS], dtype=np.int64)
        self.values = np.array([i for i in real if pieces[i] in VALUES], dtype=np.int64)
        self.bits = np.zeros(bitmask_words(self.vocab), dtype=np.int32)

    def path(self, matcher, limit: int = MAX_PATH) -> Optional[list[int]]:
        """Tokens that bring ``matcher`` (not changed) to an accepting state, or None."""
        state = matcher.copy()
        path: list[int] = []
        while len(path) < limit:
            if state.is_accepting():
                return path
            step = state.forced_tokens() or self.choose(state)
            if not step:
                return None
            for token in step:
                if not state.consume(token):
                    return None
                path.append(token)
        return None

    def choose(self, state) -> list[int]:
        for tokens in self.literal_tokens:
            if state.allows(tokens) == len(tokens):
                return tokens
        state.fill_mask(self.bits)
        allowed = unpack(self.bits, self.vocab)
        for group in (self.closers, self.separators, self.values):
            hits = group[allowed[group]] if group.size else group
            if hits.size:
                return [int(hits[0])]
        ids = np.flatnonzero(allowed & (self.lengths > 0))
        if ids.size == 0:
            return []
        return [int(ids[np.argmax(self.lengths[ids])])]

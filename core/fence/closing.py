"""Closing an open structure before the token budget runs out.

A call cut off by ``max_tokens`` is an invalid call, so near the end of the budget the fence asks
for a short way to a state where the output may end, and forces it once the remaining budget is
no longer than that path. The path is found greedily on a copy of the grammar state: the
dialect's closing tags first (``</arg_value>``), then tokens made of JSON closers (``"``, ``}``,
``]``; a quote first inside text, brackets first elsewhere), separators and short values, else
the longest allowed token (most bytes of a forced literal or a minimum length per token). When
that walk repeats itself (a tag written into a JSON string is text), a second walk goes without
the closing tags. From inside the reasoning a completion started in (``reasoning``), the path
first writes what is left of the reasoning's closing tag: the call that must follow still fits.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from kvgate.core.fence.mask import bitmask_words, unpack
from kvgate.core.fence.tokens import TokenizerInfo

MAX_PATH = 256
CLOSERS = set(b'"}]')
SEPARATORS = set(b'"}],: \n')
VALUES = {b"0", b"1", b"true", b"false", b"null", b'"', b"[", b"{", b"[]", b"{}", b'""'}


class Closer:
    """Finds closing paths for one tokenizer and one dialect's closing literals (stateless)."""

    def __init__(self, info: TokenizerInfo, closing_literals: list[str], reasoning_close: str = ""):
        self.info = info
        self.reasoning_close = reasoning_close.encode("utf-8")
        pieces = info.token_bytes()
        self.vocab = info.vocab_size
        self.literals = [text.encode("utf-8") for text in closing_literals if text]
        self.encoded: dict[bytes, list[int]] = {}
        self.costs: dict = {}  # grammar -> tokens of its shortest complete output
        self.lengths = np.array([len(p) if i not in info.special_ids else 0 for i, p in enumerate(pieces)])
        # a quote first (inside a JSON string only a quote makes progress), then longer tokens
        ranked = sorted(range(self.vocab), key=lambda i: (not pieces[i].startswith(b'"'), -len(pieces[i])))
        real = [i for i in ranked if pieces[i] and i not in info.special_ids]
        self.closers = np.array([i for i in real if set(pieces[i]) <= CLOSERS], dtype=np.int64)
        # outside a string a quote would open one: brackets first there
        self.brackets_first = np.array(sorted(self.closers.tolist(), key=lambda i: pieces[i].startswith(b'"')),
                                       dtype=np.int64)
        self.letter = info.encode("a")[0]  # allowed only inside text (a string, a raw value)
        self.separators = np.array([i for i in real if set(pieces[i]) <= SEPARATORS], dtype=np.int64)
        self.values = np.array([i for i in real if pieces[i] in VALUES], dtype=np.int64)

    def preferred(self, names: list[str]) -> np.ndarray:
        """Tokens that start spelling one of ``names`` (the required parameters): when the path
        must add a member, it adds a required one."""
        ids: dict[int, None] = {}  # the tokenizer's own first token of a whole name first
        for name in names:
            for spelled in (name, '"' + name):
                for end in range(len(spelled), 0, -1):
                    ids.update(dict.fromkeys(self.info.encode(spelled[:end])[:1]))
        return np.array(list(ids), dtype=np.int64)

    def path(self, matcher, limit: int = MAX_PATH, prefer: Optional[np.ndarray] = None,
             tail: bytes = b"", reasoning: bool = False) -> Optional[list[int]]:
        """Tokens that bring ``matcher`` (not changed) to an accepting state, or None.

        ``tail`` is the end of the output so far (a closing tag may already be half written). A
        walk that writes closing literals first (a raw value ends with its tag) gives up when it
        takes the same step twice in a row (a tag inside a JSON string is text, not progress);
        then a walk without them (JSON closers first) is taken. ``reasoning``: the output is
        still inside the reasoning, which the path closes first."""
        state, lead = matcher, []
        if reasoning and self.reasoning_close:
            state, lead, tail = self.close_reasoning(matcher, tail)
            if state is None:
                return None
        found = self.walk(state, limit - len(lead), prefer, tail, literals_first=True)
        if found is None:
            found = self.walk(state, limit - len(lead), prefer, tail, literals_first=False)
        return None if found is None else lead + found

    def close_reasoning(self, matcher, tail: bytes) -> tuple:
        """(a copy of ``matcher`` past the reasoning's closing tag, the tokens written, the new
        tail), or (None, [], tail) when the grammar does not take the tag here."""
        rest = next((self.reasoning_close[done:] for done in range(len(self.reasoning_close) - 1, -1, -1)
                     if tail.endswith(self.reasoning_close[:done])), self.reasoning_close)
        tokens = self.encode(rest)
        state = matcher.copy()
        if not tokens or state.allows(tokens) != len(tokens):
            return None, [], tail
        for token in tokens:
            state.consume(token)
        return state, tokens, (tail + rest)[-64:]

    def walk(self, matcher, limit: int, prefer: Optional[np.ndarray], tail: bytes,
             literals_first: bool) -> Optional[list[int]]:
        state = matcher.copy()
        path: list[int] = []
        previous: Optional[list[int]] = None
        pieces = self.info.token_bytes()
        while len(path) < limit:
            if state.is_accepting():
                return path
            step = state.forced_tokens()
            if not step:
                step = self.choose(state, prefer, tail, literals_first)
                if not step or (literals_first and step == previous):
                    return None
                previous = step
            for token in step:
                if not state.consume(token):
                    return None
                path.append(token)
                tail = (tail + pieces[token])[-64:]
        return None

    def encode(self, data: bytes) -> list[int]:
        if data not in self.encoded:
            self.encoded[data] = self.info.encode(data.decode("utf-8", "ignore"))
        return self.encoded[data]

    def remainders(self, tail: bytes) -> list[bytes]:
        """What is left to write of each closing literal, longest written part first."""
        out = []
        for literal in self.literals:
            for done in range(len(literal) - 1, -1, -1):
                if 0x80 <= literal[done] < 0xC0:
                    continue  # the rest would start inside a character: it cannot be encoded as text
                if tail.endswith(literal[:done]):
                    out.append(literal[done:])
                    break
        return out

    def choose(self, state, prefer: Optional[np.ndarray] = None, tail: bytes = b"",
               literals_first: bool = True) -> list[int]:
        forced = state.forced_bytes()
        rests = self.remainders(tail) if literals_first else []
        for rest in rests + ([forced] if forced else []):
            tokens = self.encode(rest)
            if tokens and state.allows(tokens) == len(tokens):
                return tokens
        bits = np.zeros(bitmask_words(self.vocab), dtype=np.int32)  # per call: fences run on several threads
        state.fill_mask(bits)
        allowed = unpack(bits, self.vocab)
        closers = self.closers if allowed[self.letter] else self.brackets_first
        groups = (closers, self.separators, self.values) + ((prefer,) if prefer is not None else ())
        for group in groups:
            hits = group[allowed[group]] if group.size else group
            if hits.size:
                return [int(hits[0])]
        ids = np.flatnonzero(allowed & (self.lengths > 0))
        if ids.size == 0:
            return []
        return [int(ids[np.argmax(self.lengths[ids])])]

"""Logprobs as clients see them: which generated tokens are answer text, and each token's text and bytes.

The engine hands over a :class:`~kvgate.core.engine.sampling.TokenLogprobs` per generated token of
a request that asked for logprobs. Only tokens whose text went, at least in part, to answer text
(``TextDelta``) are reported: reasoning and tool-call tokens are not (OpenAI reports the logprobs
of message content only). Tokens are matched to deltas by character position in the model's
output text as the detokenizer decided it (the parser reads a prefix of that text: the stop
scanner only delays it and cuts it at a stop string, so positions agree):

* a token covers the characters the detokenizer emitted when it was pushed; a token that ends
  inside a character emits nothing and shares the span of the token that completes the character;
* a delta starts at ``TextDelta.at`` (where the parser took it from); a token goes with the first
  delta that holds one of its characters, so a token split between answer text and a tag is
  reported once, with the text; tokens wholly inside reasoning, a tool call, a stop string or a
  character cut off at the length limit are reported nowhere;
* a parser that does not set ``at`` is taken to emit its answer text contiguously.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from kvgate.core.engine.sampling import TokenLogprobs
from kvgate.core.fence.tokens import byte_decoder, is_byte_level
from kvgate.core.types import TextDelta, TokenLogprob

LOWEST = -9999.0  # what an impossible token reports instead of -inf, which JSON cannot carry
BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # a SentencePiece byte token


class TokenPieces:
    """The decoded text and the raw bytes of token ids, for one tokenizer (memoised)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.byte_level = is_byte_level(tokenizer)
        added = tokenizer.get_added_tokens_decoder()
        self.added = frozenset(added)  # stored as their text, even in a byte-level vocabulary
        self._memo: dict[int, tuple[str, bytes]] = {}

    def piece(self, token_id: int) -> tuple[str, bytes]:
        found = self._memo.get(token_id)
        if found is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            found = self._memo[token_id] = (text, self._bytes(token_id, text))
        return found

    def _bytes(self, token_id: int, text: str) -> bytes:
        piece = self.tokenizer.id_to_token(token_id) or ""
        table = byte_decoder()
        if self.byte_level and token_id not in self.added and piece and all(ch in table for ch in piece):
            return bytes(table[ch] for ch in piece)
        match = BYTE_FALLBACK.fullmatch(piece)
        return bytes([int(match.group(1), 16)]) if match else text.encode("utf-8")

    def logprob(self, token_id: int, logprobs: TokenLogprobs) -> TokenLogprob:
        text, raw = self.piece(token_id)
        top = [TokenLogprob(*self.piece(i), max(value, LOWEST)) for i, value in logprobs.top]
        return TokenLogprob(text, raw, max(logprobs.logprob, LOWEST), top)


class ContentLogprobs:
    """One response's tokens, waiting for the answer-text deltas that carry them."""

    def __init__(self, pieces: TokenPieces):
        self.pieces = pieces
        self.spans: collections.deque[tuple[int, int, list[TokenLogprob]]] = collections.deque()
        self.held: list[TokenLogprob] = []  # tokens whose characters the detokenizer still holds
        self.decided = 0  # characters of output text decided so far
        self.content_end = 0  # where the last delta ended (for parsers that do not set ``at``)

    def token(self, token_id: int, logprobs: TokenLogprobs, text: str) -> None:
        """A generated token and the text the detokenizer emitted for it ('' while it holds it)."""
        self.held.append(self.pieces.logprob(token_id, logprobs))
        self.text(text)

    def text(self, text: str) -> None:
        """Text the detokenizer emitted (for the held tokens)."""
        if text:
            self.spans.append((self.decided, self.decided + len(text), self.held))
            self.decided += len(text)
            self.held = []

    def attach(self, delta: TextDelta) -> None:
        """Put on ``delta`` the tokens whose first answer character it holds; drop those before it."""
        start = self.content_end if delta.at is None else delta.at
        end = self.content_end = start + len(delta.text)
        while self.spans and self.spans[0][0] < end:
            _, span_end, tokens = self.spans.popleft()
            if span_end > start:
                delta.logprobs.extend(tokens)

"""Streaming detokenization: turn generated token ids into text as soon as the text is decided.

Byte-level tokens can end in the middle of a UTF-8 character, and decoders that strip a leading
space depend on the previous token. So each step decodes a short window -- the tokens of the last
emitted piece plus the new ones -- and emits only what the window adds past the already-emitted
piece. While the window's text ends in U+FFFD (an incomplete character) nothing is emitted: the
bytes are held until the character completes, or until :meth:`flush`. The concatenation of every
``push`` plus ``flush`` equals ``tokenizer.decode(all ids, skip_special_tokens=...)`` with the same
flag (note: the ``tokenizers`` default for that flag is True, this class's default is False).
"""

from __future__ import annotations

from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0  # start of the window: the tokens of the last emitted piece
        self._read_offset = 0  # tokens before this point are fully emitted

    @property
    def token_ids(self) -> list[int]:
        return list(self._ids)

    @property
    def window_size(self) -> int:
        """Tokens decoded per step: the last emitted piece plus what is held back."""
        return len(self._ids) - self._prefix_offset

    def push(self, token_id: int) -> str:
        """Add one token; return the text it decides (possibly empty)."""
        self._ids.append(token_id)
        return self._advance(final=False)

    def push_many(self, token_ids) -> str:
        return "".join(self.push(token_id) for token_id in token_ids)

    def flush(self) -> str:
        """Emit whatever is held back (an incomplete character decodes to U+FFFD, as decode() does)."""
        return self._advance(final=True)

    def _decode(self, start: int, end: int) -> str:
        return self._tokenizer.decode(self._ids[start:end], skip_special_tokens=self._skip_special)

    def _advance(self, final: bool) -> str:
        if self._read_offset == len(self._ids):
            return ""
        emitted = self._decode(self._prefix_offset, self._read_offset)
        window = self._decode(self._prefix_offset, len(self._ids))
        if not final and (len(window) <= len(emitted) or window.endswith(REPLACEMENT)):
            return ""
        if not window.startswith(emitted):
            # The decoder rewrote already-emitted text (not seen with byte-level BPE); never re-emit it.
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return window[len(emitted):]

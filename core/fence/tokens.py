"""What fences need to know about the active tokenizer, built once per runtime.

``tokenizer_info(tokenizer, eos_token_ids)`` wraps a ``tokenizers.Tokenizer``: vocabulary size,
end-of-turn ids, special tokens, the bytes of every token, and what fences build once for it
(``backends``, a :class:`kvgate.core.fence.caches.FenceCaches`).
:func:`verify_literals` encodes each literal of a dialect with this tokenizer and checks that the
tokens spell the literal exactly; a tokenizer that cannot (unknown pieces, lossy normalisation,
a special token cut in half) fails here, when the fence is built, never mid-generation.
``unit_texts`` are all added tokens (special or not): grammar literals force them as the token.
"""

from __future__ import annotations

import bisect
import json
import threading
from functools import lru_cache
from typing import Any, Iterable

from kvgate.core.fence.caches import FenceCaches
from kvgate.core.fence.errors import FenceError

VERIFIED_CACHE = 4096


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level alphabet: printable stand-in character -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def is_byte_level(tokenizer: Any) -> bool:
    try:
        decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    except Exception:
        return False
    kinds = [decoder.get("type")] + [d.get("type") for d in decoder.get("decoders", [])]
    return "ByteLevel" in kinds


class TokenizerInfo:
    """Immutable facts about one tokenizer plus the fences' caches (guarded by a lock)."""

    def __init__(self, tokenizer: Any, eos_token_ids: Iterable[int]):
        self.tokenizer = tokenizer
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
        self.eos_ids = tuple(int(i) for i in eos_token_ids)
        bad = [i for i in self.eos_ids if not 0 <= i < self.vocab_size]
        if bad:
            raise FenceError(f"end-of-turn token ids {bad} are outside the vocabulary of {self.vocab_size}")
        added = tokenizer.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        self.special_texts = {t.content: i for i, t in added.items() if t.special}
        # every added token (special or not) is matched as one unit before BPE: a grammar literal
        # holding its text is forced as that token, never spelled out in pieces
        self.unit_texts = {t.content: i for i, t in added.items() if t.content}
        self.byte_level = is_byte_level(tokenizer)
        self.backends = FenceCaches()
        self.lock = threading.Lock()
        self._token_bytes: list[bytes] | None = None
        self._sorted: tuple[list[bytes], list[int]] | None = None
        self._verified: dict[str, None] = {}

    def token_bytes(self) -> list[bytes]:
        """The bytes each token id spells (special tokens spell their text)."""
        if self._token_bytes is None:
            self._token_bytes = [self._bytes_of(i) for i in range(self.vocab_size)]
        return self._token_bytes

    def _bytes_of(self, token_id: int) -> bytes:
        piece = self.tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if token_id in self.special_ids or not self.byte_level:
            if not self.byte_level and token_id not in self.special_ids:
                return self.tokenizer.decode([token_id], skip_special_tokens=False).encode("utf-8")
            return piece.encode("utf-8")
        table = byte_decoder()
        try:
            return bytes(table[ch] for ch in piece)
        except KeyError:  # an added plain-text token is stored as its text
            return piece.encode("utf-8")

    def sorted_pieces(self) -> tuple[list[bytes], list[int]]:
        """Token bytes in sorted order with their ids (prefix look-ups by bisection)."""
        if self._sorted is None:
            order = sorted((p, i) for i, p in enumerate(self.token_bytes()) if p and i not in self.special_ids)
            self._sorted = ([p for p, _ in order], [i for _, i in order])
        return self._sorted

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def verify_literals(self, owner: str, literals: Iterable[str]) -> None:
        """Raise FenceError when a literal does not round-trip through this tokenizer."""
        for text in literals:
            if not text or text in self._verified:
                continue
            check_literal(self, owner, text)
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.clear()  # grammar literals hold tool names: keep the memo bounded
            self._verified[text] = None


def check_literal(info: TokenizerInfo, owner: str, text: str) -> None:
    ids = info.encode(text)
    pieces = [info.token_bytes()[i] if 0 <= i < info.vocab_size else b"" for i in ids]
    if b"".join(pieces) != text.encode("utf-8"):
        spelled = b"".join(pieces).decode("utf-8", "replace")
        raise FenceError(
            f"incompatible tokenizer for {owner}: literal {text!r} encodes to tokens {ids} that spell "
            f"{spelled!r}; the fence cannot force this literal")
    for special, token in info.special_texts.items():
        if special and special in text and token not in ids:
            raise FenceError(
                f"incompatible tokenizer for {owner}: literal {text!r} contains the special token "
                f"{special!r} but does not encode to it")


def tokenizer_info(runtime_tokenizer: Any, eos_token_ids: list[int]) -> TokenizerInfo:
    """Build the fence view of a runtime's tokenizer (cache the result per runtime)."""
    if not hasattr(runtime_tokenizer, "get_vocab_size") or not hasattr(runtime_tokenizer, "to_str"):
        raise FenceError("fences need a tokenizers.Tokenizer (the runtime's tokenizer has no get_vocab_size/to_str)")
    return TokenizerInfo(runtime_tokenizer, eos_token_ids)


def tokens_starting_with(info: TokenizerInfo, prefix: bytes) -> list[int]:
    """Ids of the (non-special) tokens whose bytes start with ``prefix``."""
    keys, ids = info.sorted_pieces()
    start = bisect.bisect_left(keys, prefix)
    end = start
    while end < len(keys) and keys[end].startswith(prefix):
        end += 1
    return ids[start:end]

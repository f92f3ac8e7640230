"""The tokenizer service: one ``tokenizers.Tokenizer``, behind the tokenizer cache when one is in use.

``encode`` never adds special tokens of its own (chat templates write BOS themselves) but does
recognise special tokens written in the text. The service tokenizes with a private copy of the
tokenizer (truncation and padding off), so later changes to the caller's object cannot make the
cache stale; :meth:`TokenizerService.reload` swaps in another tokenizer and builds a fresh cache
when its fingerprint differs -- every cache belongs to exactly one tokenizer fingerprint.

Texts longer than ``LONG_TEXT_CHARS`` are encoded through ``encode_batch``, which releases the GIL
(a plain ``encode`` holds it for the whole text), and texts longer than ``UNCACHED_TEXT_CHARS``
bypass the cache, so one huge prompt neither stalls other threads nor stays in memory.
``longest_token_chars`` bounds how much text one token can cover: a text of ``n`` characters has
at least ``n / longest_token_chars`` tokens, which lets the pipeline refuse an oversized prompt
before tokenizing it.

The cache is built by the factory given (:mod:`kvgate.core.tokenizer_cache`); without one every
text is tokenized directly, ``encode_prompt`` is ``encode`` and no output is registered.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import attrs
from tokenizers import Encoding, Tokenizer

from kvgate.core.errors import InvalidRequest
from kvgate.core.tokenizer_cache import CacheFactory, TokenizerCache

LONG_TEXT_CHARS = 32 * 1024
UNCACHED_TEXT_CHARS = 4 * 1024 * 1024


def encode_text(tokenizer: Tokenizer, text: str) -> Encoding:
    """``tokenizer.encode`` without special tokens added; long texts without holding the GIL."""
    if len(text) > LONG_TEXT_CHARS:
        return tokenizer.encode_batch([text], add_special_tokens=False)[0]
    return tokenizer.encode(text, add_special_tokens=False)


def longest_token_chars(tokenizer: Tokenizer) -> int:
    """The most characters of input text one token can stand for (vocabulary and added tokens).

    Byte-level vocabularies write one character per byte, so a token's string is never shorter
    than the text it covers."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    return max((len(token) for token in vocab), default=1)


def private_copy(tokenizer: Tokenizer) -> Tokenizer:
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    if hasattr(copy, "encode_special_tokens"):
        copy.encode_special_tokens = False  # special tokens in the text stay special
    return copy


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


@contextmanager
def lone_surrogates_refused() -> Iterator[None]:
    try:
        yield
    except (TypeError, UnicodeEncodeError):  # a lone surrogate: tokenizers refuses such a str
        raise InvalidRequest("text contains a lone surrogate and cannot be tokenized") from None


@attrs.frozen
class _Loaded:
    tokenizer: Tokenizer
    fingerprint: str
    vocab_size: int
    cache: Optional[TokenizerCache]
    longest_token_chars: int


class TokenizerService:
    def __init__(self, tokenizer: Tokenizer, cache_factory: Optional[CacheFactory] = None):
        """``cache_factory`` builds the cache for each tokenizer loaded; None tokenizes uncached."""
        self._cache_factory = cache_factory
        self._loaded = self._load(tokenizer)

    def _load(self, tokenizer: Tokenizer) -> _Loaded:
        own = private_copy(tokenizer)

        def encode_plain(text: str) -> Encoding:
            return encode_text(own, text)

        cache = self._cache_factory(own, encode_plain) if self._cache_factory is not None else None
        return _Loaded(own, tokenizer_fingerprint(own), own.get_vocab_size(with_added_tokens=True), cache,
                       longest_token_chars(own))

    def reload(self, tokenizer: Tokenizer) -> bool:
        """Use ``tokenizer`` from now on; returns True when its fingerprint differs (a fresh cache)."""
        if tokenizer_fingerprint(private_copy(tokenizer)) == self.fingerprint:
            return False
        self._loaded = self._load(tokenizer)
        return True

    @property
    def tokenizer(self) -> Tokenizer:
        """The service's own copy; treat it as read-only."""
        return self._loaded.tokenizer

    @property
    def fingerprint(self) -> str:
        return self._loaded.fingerprint

    @property
    def vocab_size(self) -> int:
        return self._loaded.vocab_size

    @property
    def longest_token_chars(self) -> int:
        return self._loaded.longest_token_chars

    @property
    def cache(self) -> Optional[TokenizerCache]:
        """The cache in front of the current tokenizer, None when the service has none."""
        return self._loaded.cache

    def encode(self, text: str, namespace: str = "") -> list[int]:
        """The ids of ``text``; the cache's entries are scoped by cache ``namespace`` (a tenant's)."""
        cache = self._cache_for(text)
        if not text:
            return []
        with lone_surrogates_refused():
            if cache is None:
                return encode_text(self._loaded.tokenizer, text).ids
            return cache.encode(text, namespace)

    def encode_prompt(self, text: str, namespace: str) -> list[int]:
        """``encode(text)``, except where the cache keeps ids registered for ``namespace``."""
        cache = self._cache_for(text)
        if cache is None or not text:
            return self.encode(text, namespace)
        with lone_surrogates_refused():
            return cache.encode_prompt(text, namespace)

    def register_output(self, namespace: str, prompt: Sequence[int], output: Sequence[int]) -> bool:
        """Offer ``output`` (sampled after ``prompt``) to the cache for prompts that resend it;
        returns whether it was kept (never without a cache)."""
        cache = self._loaded.cache
        return cache is not None and cache.register_output(namespace, prompt, output)

    def _cache_for(self, text: str) -> Optional[TokenizerCache]:
        """The cache to ask for ``text``'s ids: None for a huge text (or when there is none)."""
        if not isinstance(text, str):
            raise InvalidRequest(f"text to tokenize must be a string, not {type(text).__name__}")
        return self._loaded.cache if len(text) <= UNCACHED_TEXT_CHARS else None

    def encode_uncached(self, text: str) -> list[int]:
        return encode_text(self._loaded.tokenizer, text).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        for position, token_id in enumerate(ids):
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < self.vocab_size:
                raise InvalidRequest(f"token {position} is {token_id!r}, not an id in [0, {self.vocab_size})",
                                     param="tokens")
        return self._loaded.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def cache_stats(self) -> dict[str, Any]:
        """The tokenizer fingerprint and the cache's own stats (nothing else without a cache)."""
        loaded = self._loaded
        return {"fingerprint": loaded.fingerprint, **(loaded.cache.stats() if loaded.cache is not None else {})}

    def clear_cache(self) -> None:
        if self._loaded.cache is not None:
            self._loaded.cache.clear()

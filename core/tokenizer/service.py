"""The tokenizer service: one ``tokenizers.Tokenizer`` behind the two-level cache.

``encode`` never adds special tokens of its own (chat templates write BOS themselves) but does
recognise special tokens written in the text. The service tokenizes with a private copy of the
tokenizer (truncation and padding off), so later changes to the caller's object cannot make the
caches stale; :meth:`TokenizerService.reload` swaps in another tokenizer and drops the caches when
its fingerprint differs -- every cache belongs to exactly one tokenizer fingerprint.

Texts longer than ``LONG_TEXT_CHARS`` are encoded through ``encode_batch``, which releases the GIL
(a plain ``encode`` holds it for the whole text), and texts longer than ``UNCACHED_TEXT_CHARS``
bypass both caches, so one huge prompt neither stalls other threads nor stays in memory.
``longest_token_chars`` bounds how much text one token can cover: a text of ``n`` characters has
at least ``n / longest_token_chars`` tokens, which lets the pipeline refuse an oversized prompt
before tokenizing it.

:meth:`TokenizerService.encode_prompt` tokenizes a prompt of one cache namespace: a resent
assistant turn whose text is an output registered by :meth:`TokenizerService.register_output` gets
the ids the model sampled for it (:mod:`kvgate.core.tokenizer.outputs`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Iterable, Optional, Sequence

import attrs
from prometheus_client import CollectorRegistry
from tokenizers import Encoding, Tokenizer

from kvgate.core.config import TokenizerCacheConfig
from kvgate.core.errors import InvalidRequest
from kvgate.core.tokenizer.cache import TokenizerCache
from kvgate.core.tokenizer.boundaries import choose_boundary_tokens
from kvgate.core.tokenizer.cache_metrics import metrics_for
from kvgate.core.tokenizer.outputs import OutputIdsRegistry, boundary_pattern, segment_spans

log = logging.getLogger(__name__)
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


@attrs.frozen
class _Loaded:
    tokenizer: Tokenizer
    fingerprint: str
    vocab_size: int
    boundary_tokens: dict[str, int]
    refused_boundaries: dict[str, str]
    cache: TokenizerCache
    longest_token_chars: int
    outputs: OutputIdsRegistry
    boundary_pattern: Optional[re.Pattern]


class TokenizerService:
    def __init__(self, tokenizer: Tokenizer, config: Optional[TokenizerCacheConfig] = None,
                 registry: Optional[CollectorRegistry] = None, special_tokens: Iterable[str] = (),
                 seed: Optional[int] = None):
        """``special_tokens``: extra boundary candidates (e.g. BOS/EOS named by the model config)."""
        self.config = config or TokenizerCacheConfig()
        self._metrics = metrics_for(registry)
        self._extra_specials = tuple(special_tokens)
        self._seed = seed
        self._loaded = self._load(tokenizer)

    def _load(self, tokenizer: Tokenizer) -> _Loaded:
        own = private_copy(tokenizer)
        safe, refused = choose_boundary_tokens(own, self._extra_specials)
        for content, reason in refused.items():
            log.info("tokenizer cache: %r is not an L1 boundary: %s", content, reason)
        boundary = {content: own.token_to_id(content) for content in safe}

        def encode_plain(text: str) -> Encoding:
            return encode_text(own, text)

        cache = TokenizerCache(encode_plain, self.config, boundary, self._metrics, self._seed)
        return _Loaded(own, tokenizer_fingerprint(own), own.get_vocab_size(with_added_tokens=True),
                       boundary, refused, cache, longest_token_chars(own), OutputIdsRegistry(),
                       boundary_pattern(boundary))

    def reload(self, tokenizer: Tokenizer) -> bool:
        """Use ``tokenizer`` from now on; returns True when its fingerprint differs (caches dropped)."""
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
    def boundary_tokens(self) -> dict[str, int]:
        return dict(self._loaded.boundary_tokens)

    @property
    def refused_boundaries(self) -> dict[str, str]:
        return dict(self._loaded.refused_boundaries)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise InvalidRequest(f"text to tokenize must be a string, not {type(text).__name__}")
        if not text:
            return []
        try:
            if len(text) > UNCACHED_TEXT_CHARS:
                return encode_text(self._loaded.tokenizer, text).ids
            return self._loaded.cache.encode(text)
        except (TypeError, UnicodeEncodeError):  # a lone surrogate: tokenizers refuses such a str
            raise InvalidRequest("text contains a lone surrogate and cannot be tokenized") from None

    def encode_prompt(self, text: str, namespace: str) -> list[int]:
        """``encode(text)``, except that each run between boundary tokens whose text is an output
        registered in ``namespace`` gets the ids registered for it."""
        loaded = self._loaded
        if loaded.boundary_pattern is None or not loaded.outputs.holds(namespace) or len(text) > UNCACHED_TEXT_CHARS:
            return self.encode(text)
        ids: list[int] = []
        done = 0
        for start, end in segment_spans(loaded.boundary_pattern, text):
            reused = loaded.outputs.get(namespace, text[start:end])
            if reused is None:
                continue
            ids += self.encode(text[done:start]) + reused
            done = end
            self._metrics.output_reused(len(reused))
        return ids + self.encode(text[done:])

    def register_output(self, namespace: str, prompt: Sequence[int], output: Sequence[int]) -> bool:
        """Remember ``output`` (sampled after ``prompt``) as the ids of the run a resent turn will
        hold: the prompt's tail after its last boundary token, then the output up to its stop
        token. Returns False for an output that cannot be such a run (nothing is kept)."""
        if not self.config.reuse_output_ids:
            return False
        loaded = self._loaded
        boundary_ids = frozenset(loaded.boundary_tokens.values())
        body = list(output)
        while body and body[-1] in boundary_ids:
            body.pop()
        header_start = next((i + 1 for i in range(len(prompt) - 1, -1, -1) if prompt[i] in boundary_ids), None)
        if not body or header_start is None or boundary_ids.intersection(body):
            return False
        ids = list(prompt[header_start:]) + body
        segment = loaded.tokenizer.decode(ids, skip_special_tokens=False)
        if loaded.boundary_pattern.search(segment) or "\ufffd" in segment:
            return False  # it would not be one run between boundaries, or not decode to its own text
        loaded.outputs.add(namespace, segment, ids)
        return True

    def encode_uncached(self, text: str) -> list[int]:
        return encode_text(self._loaded.tokenizer, text).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        for position, token_id in enumerate(ids):
            if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < self.vocab_size:
                raise InvalidRequest(f"token {position} is {token_id!r}, not an id in [0, {self.vocab_size})",
                                     param="tokens")
        return self._loaded.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def cache_stats(self) -> dict:
        loaded = self._loaded
        outputs = {"entries": len(loaded.outputs), "bytes": loaded.outputs.used_bytes}
        return {"fingerprint": loaded.fingerprint, "l1_boundary_tokens": sorted(loaded.boundary_tokens),
                **loaded.cache.stats(), "outputs": outputs}

    def clear_cache(self) -> None:
        self._loaded.cache.clear()
        self._loaded.outputs.clear()

"""Property tests: whatever the cache does, encode() equals plain tokenization, token for token.

Texts are random mixes of ASCII, digits, whitespace, CJK, emoji and accents with special tokens at
random places, also fragments of special tokens; each case also tokenizes prefixes that end just
before, inside and just after every special token, and grown versions of earlier texts, in random
order, through one service with small budgets so that evictions happen too.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.core.tokenizer.service import TokenizerService
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig

from tests.plugins.tokenizer_cache.services import cached_service

PLAIN = st.lists(st.sampled_from(list("ab xyZ019\n\t.,'s:") + ["中", "文", "😀", "é", "👍🏽", " \n"]),
                 max_size=12).map("".join)
SPECIAL = st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "<|im_", "|>", "<",
                           "<|im_start|>user\n", "<|im_end|>\n", "<|im_end|> ", "<|endoftext|>12"])
PIECES = st.lists(st.one_of(PLAIN, SPECIAL), min_size=1, max_size=14)
CONFIGS = [
    TokenizerCacheConfig(enable_l0=True, enable_l1=True, l0_max_entries=5, l1_max_bytes=6000),
    TokenizerCacheConfig(enable_l0=False, enable_l1=True, l1_max_bytes=3000),
    TokenizerCacheConfig(enable_l0=True, enable_l1=False, l0_max_entries=3),
    TokenizerCacheConfig(),
]
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def cut_points(text: str) -> list[int]:
    """Offsets just before, inside and just after each special token occurrence."""
    points = []
    for special in SPECIALS:
        start = text.find(special)
        while start >= 0:
            end = start + len(special)
            points += [max(start - 1, 0), start, start + 1, start + len(special) // 2, end - 1, end, end + 1]
            start = text.find(special, end)
    return sorted({p for p in points if 0 <= p <= len(text)})


def texts_for(pieces: list[str], more: list[str]) -> list[str]:
    base = "".join(pieces)
    grown = base + "".join(more)
    return [base, grown, grown + base] + [grown[:p] for p in cut_points(grown)]


def check_service(service: TokenizerService, texts: list[str], order: list[int]) -> None:
    for index in order:
        text = texts[index % len(texts)]
        assert service.encode(text) == service.encode_uncached(text), repr(text)


@pytest.mark.parametrize("config", CONFIGS, ids=["both-small", "l1-only", "l0-only", "defaults"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=PIECES, more=PIECES, order=st.lists(st.integers(0, 60), min_size=1, max_size=40))
def test_small_bpe_cache_equals_plain(small_bpe, config, pieces, more, order):
    service = cached_service(small_bpe, config, seed=1)
    check_service(service, texts_for(pieces, more), order + order)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=PIECES, more=PIECES, order=st.lists(st.integers(0, 60), min_size=1, max_size=30))
def test_smollm2_cache_equals_plain(smollm2_service, pieces, more, order):
    smollm2_service.clear_cache()
    check_service(smollm2_service, texts_for(pieces, more), order + order)


@pytest.fixture(scope="module")
def smollm2_service(smollm2_tokenizer):
    return cached_service(smollm2_tokenizer, TokenizerCacheConfig(l0_max_entries=4, l1_max_bytes=8000), seed=2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=PLAIN, special=st.sampled_from(SPECIALS + ("<file_sep>", "<jupyter_code>")), after=PIECES)
def test_smollm2_special_token_is_an_atomic_boundary(smollm2_tokenizer, before, special, after):
    """The property L1 rests on, checked on the real tokenizer: encode(p+S+q) == encode(p+S) + encode(q)."""
    tail = "".join(after)

    def encode(text: str) -> list[int]:
        return smollm2_tokenizer.encode(text, add_special_tokens=False).ids

    assert encode(before + special + tail) == encode(before + special) + encode(tail)


def test_smollm2_declares_its_control_tokens_as_boundaries(smollm2_service):
    boundaries = smollm2_service.cache.boundary_tokens
    assert {"<|im_start|>": 1, "<|im_end|>": 2, "<|endoftext|>": 0}.items() <= boundaries.items()
    assert smollm2_service.cache.refused_boundaries == {}

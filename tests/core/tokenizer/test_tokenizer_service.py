"""TokenizerService without a tokenizer cache: private copy, decode, bad input, the cache-facing
methods answering as "no cache" does, reload."""

from __future__ import annotations

import pytest
from tokenizers import AddedToken, Tokenizer

from kvgate.core.errors import InvalidRequest
from kvgate.core.tokenizer.service import TokenizerService

PROMPT = "<|im_start|>user\nhéllo 中文 😀<|im_end|>\n<|im_start|>assistant\n"


def plain(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_service_ignores_later_changes_and_truncation_of_the_callers_tokenizer(small_bpe):
    callers = Tokenizer.from_str(small_bpe.to_str())
    callers.enable_truncation(4)
    service = TokenizerService(callers)
    text = PROMPT * 3
    callers.add_special_tokens([AddedToken("question", special=True, normalized=False)])
    assert service.encode(text) == plain(small_bpe, text)
    assert len(service.encode(text)) > 4


def test_decode_roundtrip_and_validation(small_bpe):
    service = TokenizerService(small_bpe)
    assert service.decode(service.encode(PROMPT)) == PROMPT
    assert "<|im_start|>" not in service.decode(service.encode(PROMPT), skip_special_tokens=True)
    for bad in ([service.vocab_size], [-1], [True], ["3"], [1.5]):
        with pytest.raises(InvalidRequest):
            service.decode(bad)


@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["list"], "lone \ud800 surrogate<|im_end|>"])
def test_encode_rejects_what_is_not_text(small_bpe, bad):
    service = TokenizerService(small_bpe)
    for encode in (service.encode, lambda text: service.encode_prompt(text, "ns")):
        with pytest.raises(InvalidRequest):
            encode(bad)


def test_empty_text_is_no_tokens(small_bpe):
    assert TokenizerService(small_bpe).encode("") == []


def test_without_a_cache_prompts_tokenize_plainly_and_no_output_is_kept(small_bpe):
    service = TokenizerService(small_bpe)
    assert service.cache is None
    assert service.encode_prompt(PROMPT, "ns") == service.encode(PROMPT) == plain(small_bpe, PROMPT)
    assert not service.register_output("ns", service.encode(PROMPT), service.encode("ok<|im_end|>"))
    assert service.cache_stats() == {"fingerprint": service.fingerprint}
    service.clear_cache()


def test_reload_swaps_the_tokenizer_only_when_its_fingerprint_differs(small_bpe):
    service = TokenizerService(small_bpe)
    assert service.reload(Tokenizer.from_str(small_bpe.to_str())) is False
    changed = Tokenizer.from_str(small_bpe.to_str())
    changed.add_special_tokens([AddedToken("<new_special>", special=True, normalized=False)])
    old = service.fingerprint
    assert service.reload(changed) is True and service.fingerprint != old
    assert service.encode("a<new_special>b") == plain(changed, "a<new_special>b")

"""IncrementalDetokenizer: streamed text equals decode(all ids), never a premature U+FFFD, small windows."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvgate.core.pipeline.detokenizer import IncrementalDetokenizer

REPLACEMENT = "\ufffd"
TEXT = st.lists(st.sampled_from(["中文", "日本語", "😀", "👍🏽", "🎉🎉", "é", "ñ", "hello", " world", "\n", "12",
                                 "<|im_end|>", "한국어", "∑x²", " "]), min_size=1, max_size=30).map("".join)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def stream(tokenizer, ids, skip_special_tokens=False) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=skip_special_tokens)
    return [detok.push(token_id) for token_id in ids] + [detok.flush()]


@pytest.fixture(params=["small_bpe", "smollm2_tokenizer"])
def tokenizer(request):
    return request.getfixturevalue(request.param)


@SETTINGS
@given(text=TEXT, skip=st.booleans())
def test_streamed_text_equals_decode_and_never_splits_a_character(tokenizer, text, skip):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    pieces = stream(tokenizer, ids, skip)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=skip)
    assert not any(REPLACEMENT in piece for piece in pieces)  # the text is valid UTF-8 throughout


@SETTINGS
@given(ids=st.lists(st.integers(0, 599), max_size=60))
def test_random_ids_including_broken_utf8_match_decode(small_bpe, ids):
    assert "".join(stream(small_bpe, ids)) == small_bpe.decode(ids, skip_special_tokens=False)


@SETTINGS
@given(text=TEXT, noise=st.lists(st.integers(0, 49151), max_size=20), cut=st.integers(0, 40))
def test_smollm2_mixed_valid_and_random_ids_match_decode(smollm2_tokenizer, text, noise, cut):
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False).ids
    ids = ids[:cut] + noise + ids[cut:]
    assert "".join(stream(smollm2_tokenizer, ids)) == smollm2_tokenizer.decode(ids, skip_special_tokens=False)


def test_multibyte_character_is_held_until_complete(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode("😀", add_special_tokens=False).ids
    assert len(ids) > 1  # byte-level: the emoji spans several tokens
    pieces = stream(smollm2_tokenizer, ids)
    assert pieces[:-2] == [""] * (len(ids) - 1) and pieces[-2] == "😀" and pieces[-1] == ""


def test_incomplete_tail_is_flushed_as_decode_does(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode("ab😀", add_special_tokens=False).ids[:-1]
    detok = IncrementalDetokenizer(smollm2_tokenizer)
    held = "".join(detok.push(i) for i in ids)
    assert REPLACEMENT not in held and held + detok.flush() == smollm2_tokenizer.decode(ids, skip_special_tokens=False)


def test_window_stays_small_on_long_output(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode("word 中文 😀 " * 400, add_special_tokens=False).ids
    detok = IncrementalDetokenizer(smollm2_tokenizer)
    widest = 0
    for token_id in ids:
        detok.push(token_id)
        widest = max(widest, detok.window_size)
    assert len(ids) > 2000 and widest <= 8

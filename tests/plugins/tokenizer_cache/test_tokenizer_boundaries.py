"""Tokenizers on which splitting after a special token would change the tokens: the service must
detect each one, refuse that token as an L1 boundary, and still return plain tokenization."""

from __future__ import annotations

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from kvgate.core.tokenizer.service import TokenizerService
from kvgate.plugins.tokenizer_cache.boundaries import choose_boundary_tokens

from tests.plugins.tokenizer_cache.services import cached_service
from tests.core.tokenizer.tokenizers_for_tests import CORPUS, train_byte_level_bpe


def plain(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def metaspace_first() -> Tokenizer:
    """SentencePiece-style: '▁' is prepended only at offset 0 of the input, so the text right after a
    special token is tokenized differently when it starts a new input."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 10, trainer)
    return tokenizer


def with_added(*tokens: AddedToken, extra_plain: tuple[AddedToken, ...] = ()) -> Tokenizer:
    tokenizer = train_byte_level_bpe()
    tokenizer.add_special_tokens(list(tokens))
    tokenizer.add_tokens(list(extra_plain))
    return tokenizer


def assert_service_is_exact(tokenizer: Tokenizer, texts: list[str]) -> TokenizerService:
    service = cached_service(tokenizer, seed=0)
    for text in texts + texts:
        assert service.encode(text) == plain(tokenizer, text)
    return service


def test_metaspace_first_is_refused_by_the_probe():
    tokenizer = metaspace_first()
    assert plain(tokenizer, "hello</s>world") != plain(tokenizer, "hello</s>") + plain(tokenizer, "world")
    safe, refused = choose_boundary_tokens(tokenizer)
    assert "</s>" not in safe and "probe" in refused["</s>"]
    texts = ["<s>hello</s>world", "<s>hello</s>world</s> again", "<s>hello</s>world</s> again</s>x"]
    service = assert_service_is_exact(tokenizer, texts)
    assert service.cache_stats()["l1"]["hits"] == 0


def test_rstrip_special_token_is_refused():
    tokenizer = with_added(AddedToken("<eot>", special=True, normalized=False, rstrip=True))
    assert plain(tokenizer, "a<eot>  b") != plain(tokenizer, "a<eot>") + plain(tokenizer, "  b")
    safe, refused = choose_boundary_tokens(tokenizer)
    assert "<eot>" not in safe and "rstrip" in refused["<eot>"]
    assert "<|im_end|>" in safe
    assert_service_is_exact(tokenizer, ["x<eot>  b<|im_end|>", "x<eot>  b<|im_end|> c<eot>  d", "<eot> z"])


def test_added_token_that_extends_a_special_token_is_refused():
    tokenizer = with_added(extra_plain=(AddedToken("<|im_end|>x", normalized=False),))
    assert plain(tokenizer, "a<|im_end|>xy") != plain(tokenizer, "a<|im_end|>") + plain(tokenizer, "xy")
    safe, refused = choose_boundary_tokens(tokenizer)
    assert "<|im_end|>" not in safe and "extends past it" in refused["<|im_end|>"]
    assert_service_is_exact(tokenizer, ["a<|im_end|>", "a<|im_end|>xy", "a<|im_end|>x<|im_start|>y<|im_end|>q"])


@pytest.mark.parametrize("token, reason", [
    (AddedToken("<sw>", special=True, normalized=False, single_word=True), "single_word"),
    (AddedToken("<norm>", special=True, normalized=True), "normalized"),
])
def test_special_tokens_with_neighbour_dependent_options_are_refused(token, reason):
    tokenizer = with_added(token)
    safe, refused = choose_boundary_tokens(tokenizer)
    assert token.content not in safe and reason in refused[token.content]


def test_declared_special_text_that_is_not_an_added_token_is_refused(small_bpe):
    """A BOS named in a model config but absent from the added tokens is ordinary text to BPE."""
    service = cached_service(small_bpe, special_tokens=["hello"])
    assert "hello" not in service.cache.boundary_tokens
    assert "not an added token" in service.cache.refused_boundaries["hello"]


def test_added_non_special_token_is_not_a_boundary(small_bpe):
    service = cached_service(small_bpe)
    assert "<tool_call>" not in service.cache.boundary_tokens
    assert set(service.cache.boundary_tokens) == {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

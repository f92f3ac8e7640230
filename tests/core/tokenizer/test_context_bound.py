"""Counting a long text window by window (issue 31, finding 5): a text holding far more tokens
than the context is refused after about a context's worth of tokenizing; one that may fit is
never refused by the windows."""

from __future__ import annotations

from kvgate.core.tokenizer.context_bound import WINDOW_CHARS, counted_in_windows, tokens_over, window_end
from kvgate.core.tokenizer.service import TokenizerService


class CountingEncode:
    def __init__(self, service: TokenizerService):
        self.service, self.chars = service, 0

    def __call__(self, text: str) -> list[int]:
        self.chars += len(text)
        return self.service.encode_uncached(text)


def test_a_text_far_over_the_context_is_refused_after_one_window(small_bpe):
    encode = CountingEncode(TokenizerService(small_bpe))
    text = "7 1 " * 500_000
    assert counted_in_windows(text, 1000)
    over = tokens_over(encode, text, 1000)
    assert over > 1000 and encode.chars <= WINDOW_CHARS < len(text) // 10


def test_a_text_that_fits_is_not_refused_and_its_windows_count_it_exactly(small_bpe):
    service = TokenizerService(small_bpe)
    text = "word " * 40_000
    whole = len(service.encode_uncached(text))
    assert tokens_over(service.encode_uncached, text, whole) == 0
    windows, start = 0, 0
    while start < len(text):
        end = window_end(text, start)
        windows += len(service.encode_uncached(text[start:end]))
        start = end
    assert windows == whole  # splits fall before a space: no token is cut


def test_a_text_of_one_window_is_never_refused_here(small_bpe):
    encode = CountingEncode(TokenizerService(small_bpe))
    assert tokens_over(encode, "7 1 " * (WINDOW_CHARS // 8), 10) == 0 and encode.chars == 0


def test_windows_end_before_a_space_in_their_second_half():
    text = "x" * (WINDOW_CHARS - 10) + " tail" + "y" * WINDOW_CHARS
    assert window_end(text, 0) == WINDOW_CHARS - 10
    assert window_end("z" * (2 * WINDOW_CHARS), 0) == WINDOW_CHARS  # no space: a plain cut
    assert window_end("short text", 0) == len("short text")

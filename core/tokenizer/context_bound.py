"""Refusing, with work bounded by the context, a text that holds far more tokens than it.

A text's length bounds its tokens only loosely: one token may cover ``longest_token_chars``
characters (81 for SmolLM2), so a 32K context admits 2.6M characters untokenized -- and 2.6M
digits are 2.6M tokens, 5 s of CPU and a gigabyte for one ``count_tokens``. A long text is
therefore counted window by window first and refused as soon as the windows before its last hold
more tokens than the context (plus what the splits may add); otherwise it is tokenized whole, which
then costs at most a context and one window, so no call tokenizes much more than a context's worth
(issue 31, finding 5). A text of one window is never refused here: it costs no more to count it
exactly, as before.
"""

from __future__ import annotations

from typing import Callable

WINDOW_CHARS = 64 * 1024
SPLIT_SLACK_TOKENS = 8  # tokens a split may add to a count (splits fall before a space where one is near)
CHARS_PER_TOKEN = 4  # a text longer than the context times this is counted in windows first


def counted_in_windows(text: str, limit: int) -> bool:
    """Whether ``text`` is long enough, for a context of ``limit`` tokens, to be counted in windows."""
    return len(text) > limit * CHARS_PER_TOKEN


def tokens_over(encode: Callable[[str], list[int]], text: str, limit: int) -> int:
    """The tokens ``text``'s windows before its last were found to hold, less the split slack, once
    that is past ``limit`` (the count so far: a lower bound); 0 when it never is."""
    counted = splits = start = 0
    while start < len(text):
        end = window_end(text, start)
        if end == len(text):
            return 0
        counted += len(encode(text[start:end]))
        splits += 1
        if counted - splits * SPLIT_SLACK_TOKENS > limit:
            return counted - splits * SPLIT_SLACK_TOKENS
        start = end
    return 0


def window_end(text: str, start: int) -> int:
    """Where the window from ``start`` ends: before the last space of its second half, if any."""
    end = start + WINDOW_CHARS
    if end >= len(text):
        return len(text)
    space = text.rfind(" ", start + WINDOW_CHARS // 2, end)
    return space if space > start else end

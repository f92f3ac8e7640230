"""The shape of a JSON text (nesting depth, number of items), measured on its bytes before
anything is parsed.

Brackets and commas inside strings do not count: a quote not escaped by an odd run of backslashes opens or
closes a string. The scan is vectorised with numpy and walks the text in fixed-size chunks
carrying three facts across each cut (is the next byte escaped, are we inside a string, the
depth so far), so its memory stays bounded whatever the text's size and shape. Only the bytes
that matter (quotes, backslashes, brackets) are looked at after a first pass. For text that is
not valid JSON the number may be meaningless; the parser refuses such text anyway.
"""

from __future__ import annotations

import numpy as np

CHUNK_BYTES = 1 << 20
_QUOTE, _BACKSLASH = 1, 2
_COMMA = 5
_KIND = np.zeros(256, dtype=np.int8)  # 0 other, 1 quote, 2 backslash, 3 opener, 4 closer, 5 comma
_KIND[ord('"')], _KIND[ord("\\")], _KIND[ord(",")] = _QUOTE, _BACKSLASH, _COMMA
_KIND[[ord("["), ord("{")]], _KIND[[ord("]"), ord("}")]] = 3, 4
_STEP = np.array([0, 0, 0, 1, -1, 0], dtype=np.int64)


def within(raw: bytes, max_depth: int, max_items: int) -> bool:
    """Whether ``raw`` nests at most ``max_depth`` levels and holds at most ``max_items`` items;
    counts of the raw bytes answer most bodies without a scan."""
    openers = raw.count(b"[") + raw.count(b"{")
    if openers <= max_depth and openers + raw.count(b",") <= max_items:
        return True
    depth, items = shape(raw, stop_above=max_depth)
    return depth <= max_depth and items <= max_items


def max_depth(raw: bytes, stop_above: int | None = None) -> int:
    """The deepest nesting of ``raw``; stops early once it passes ``stop_above``."""
    return shape(raw, stop_above)[0]


def shape(raw: bytes, stop_above: int | None = None) -> tuple[int, int]:
    """(deepest nesting, items) of ``raw``; items counts containers and commas outside strings,
    an upper bound of the values a parse would build, within one per container. The scan stops
    early once the depth passes ``stop_above``."""
    data = np.frombuffer(raw, dtype=np.uint8)
    escaped, in_string, depth, deepest, items = False, False, 0, 0, 0
    for start in range(0, len(data), CHUNK_BYTES):
        kinds = _KIND[data[start:start + CHUNK_BYTES]]
        where = np.flatnonzero(kinds)
        if not len(where):
            escaped = False
            continue
        kind = kinds[where]
        escaping = _escaping(kind, where, escaped)
        # a byte is escaped when the byte just before it is an escaping backslash
        before = np.concatenate(([escaped and where[0] == 0], escaping[:-1] & (np.diff(where) == 1)))
        escaped = bool(escaping[-1]) and where[-1] == len(kinds) - 1
        quotes = (kind == _QUOTE) & ~before
        inside = (np.cumsum(quotes, dtype=np.int64) + in_string) % 2 == 1
        in_string = bool(inside[-1])
        items += int(np.count_nonzero(((kind == _COMMA) | (kind == 3)) & ~inside))
        steps = np.where(inside, 0, _STEP[kind])
        levels = np.cumsum(steps) + depth
        deepest = max(deepest, int(levels.max()))
        depth = int(levels[-1])
        if stop_above is not None and deepest > stop_above:
            break
    return deepest, items


def _escaping(kind: np.ndarray, where: np.ndarray, escaped_first: bool) -> np.ndarray:
    """For each listed byte: is it a backslash that escapes the byte after it."""
    slashes = kind == _BACKSLASH
    if not slashes.any():
        return slashes
    # runs of backslashes: consecutive listed bytes at consecutive offsets
    joined = np.concatenate(([False], slashes[:-1] & slashes[1:] & (np.diff(where) == 1)))
    index = np.arange(len(kind))
    run_start = np.maximum.accumulate(np.where(slashes & ~joined, index, 0))
    offset = index - run_start  # 0 for the first backslash of a run
    if escaped_first and where[0] == 0 and slashes[0]:  # this run continues one from the last chunk
        offset = np.where(run_start == 0, offset + 1, offset)
    return slashes & (offset % 2 == 0)

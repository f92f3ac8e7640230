"""One compressed layer of one session advanced over its new tokens' raw projections: the entries
of the windows they complete are pooled once and appended (:mod:`.state`), and the raw tail moves
on to the rows the session needs from its new end (:mod:`.tail`).

A replay (:mod:`.replay`) runs the same path over tokens whose entries are all stored: it pools
nothing and only leaves the tail behind.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from kvgate.models.deepseek_v4.state import entry_view
from kvgate.models.deepseek_v4.tail import RawLayer, RawLayout, RawTail, tails

# build(which, kv, gate, first_window, previous) -> entries [windows, dims] of those raw rows
Build = Callable[[str, torch.Tensor, torch.Tensor, int, Optional[tuple]], torch.Tensor]


def advance(session, index: int, layout: RawLayout, new_rows: torch.Tensor, end: int,
            build: Build) -> dict[str, torch.Tensor]:
    """The layer's entries of windows complete by ``end`` ("kv", and "index" for CSA), after taking
    ``new_rows`` [n, width], the raw rows of positions [end - n, end)."""
    layer, held, start = layout.layers[index], tails(session), end - new_rows.shape[0]
    tail = held.get(index) or layout.empty(index, start, new_rows)
    if tail.end != start:
        raise RuntimeError(f"layer {index}: raw tail ends at {tail.end}, new rows start at {start}")
    rows = RawTail(tail.start, torch.cat([tail.rows, new_rows.to(tail.rows.dtype)]))
    out = {}
    for which in ("kv", "index") if layer.overlap else ("kv",):
        view = entry_view(session, (index, which), new_rows.new_empty(0, layer.entry_dims(which)))
        last = end // layer.rate
        if view.count < last:
            view.append(window_entries(rows, layer, which, view.count, last, build))
        out[which] = view.rows()[:last]
    held[index] = rows.keep(layout.keep_start(index, end))
    return out


def window_entries(rows: RawTail, layer: RawLayer, which: str, first: int, last: int, build: Build) -> torch.Tensor:
    """Entries of windows [first, last) pooled from ``rows`` (which must reach back far enough)."""
    rate = layer.rate
    begin = (first - 1 if layer.overlap and first else first) * rate
    if begin < rows.start:
        raise RuntimeError(f"raw rows from {begin} are gone (the tail starts at {rows.start})")
    block = rows.between(begin, last * rate)
    kv, gate = block[:, layer.field(which, "kv")], block[:, layer.field(which, "gate")]
    previous = None
    if begin < first * rate:
        previous, kv, gate = (kv[:rate], gate[:rate]), kv[rate:], gate[rate:]
    return build(which, kv, gate, first, previous)


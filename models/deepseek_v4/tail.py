"""The raw tail of a session's compressed layers: the raw projections of the tokens not yet pooled.

A compressed layer's row of raw projections per token (runtime dtype, :attr:`RawLayer.width`):
HCA ``kv``, ``gate`` (``head_dim`` each); CSA ``kv``, ``gate`` (``2 * head_dim`` each: the Ca and Cb
series) and the indexer's ``index_kv``, ``index_gate`` (``2 * index_dim`` each).

To go on from length ``n`` a layer needs the rows of positions ``[need_start(n), n)``: its open
window, and for CSA the window before it (whose Ca series the next entry pools). A session keeps
``[keep_start(n), n)``, the rows a session ``spare`` tokens shorter would need, so that a cut of up
to ``spare`` tokens (a rejected draft) never replays: at most ``rate + spare - 1`` rows (HCA) and
``2 * rate + spare - 1`` (CSA) per layer.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

from kvgate.models.deepseek_v4.arch import CSA, DeepseekV4Arch

TAILS = "deepseek_v4_tails"  # session.aux key: {layer: RawTail}


@attrs.frozen
class RawTail:
    start: int  # the position of the first row
    rows: torch.Tensor  # [n, width]

    @property
    def end(self) -> int:
        return self.start + self.rows.shape[0]

    def between(self, first: int, end: int) -> torch.Tensor:
        return self.rows[first - self.start:end - self.start]

    def keep(self, first: int, end: Optional[int] = None) -> "RawTail":
        """Its rows of [first, end), copied: a view would hold on to all the rows it was cut from."""
        first, end = max(first, self.start), self.end if end is None else min(end, self.end)
        return RawTail(first, self.between(first, end).clone())


@attrs.frozen
class RawLayer:
    rate: int
    overlap: bool  # CSA: an entry also pools the previous window's Ca series
    fields: dict  # name -> slice of the row

    @property
    def width(self) -> int:
        return max(s.stop for s in self.fields.values())

    def field(self, which: str, part: str) -> slice:
        """The row's ``part`` ("kv" or "gate") of the compressor ``which`` ("kv", or CSA's "index")."""
        return self.fields[part if which == "kv" else "index_" + part]

    def entry_dims(self, which: str) -> int:
        field = self.field(which, "kv")
        return (field.stop - field.start) // (2 if self.overlap else 1)

    def need_start(self, length: int) -> int:
        windows = length // self.rate
        return max(0, windows - 1 if self.overlap else windows) * self.rate


class RawLayout:
    """The raw rows of every compressed layer (``layers``: index -> :class:`RawLayer`)."""

    def __init__(self, arch: DeepseekV4Arch, spare: int):
        self.spare, self.layers = spare, {}
        for index in range(arch.layers):
            if arch.rate(index):
                csa = arch.kinds[index] == CSA
                widths = {"kv": arch.head_dim, "gate": arch.head_dim}
                if csa:
                    widths = {"kv": 2 * arch.head_dim, "gate": 2 * arch.head_dim,
                              "index_kv": 2 * arch.index_dim, "index_gate": 2 * arch.index_dim}
                self.layers[index] = RawLayer(arch.rate(index), csa, _slices(widths))

    def keep_start(self, index: int, length: int) -> int:
        return self.layers[index].need_start(max(0, length - self.spare))

    def replay_start(self, length: int) -> int:
        """Where a replay that rebuilds every layer's tail at ``length`` begins."""
        return min((layer.need_start(length) for layer in self.layers.values()), default=length)

    def empty(self, index: int, start: int, like: torch.Tensor) -> RawTail:
        return RawTail(start, like.new_empty(0, self.layers[index].width))


def _slices(widths: dict[str, int]) -> dict[str, slice]:
    fields, offset = {}, 0
    for name, width in widths.items():
        fields[name], offset = slice(offset, offset + width), offset + width
    return fields


def tails(session) -> dict:
    return session.aux.setdefault(TAILS, {})


def covers(session, layout: RawLayout, length: int) -> bool:
    """Whether the session's tails hold what every layer needs to go on from ``length``."""
    held = tails(session)
    if length == 0:
        return True
    return all(i in held and held[i].start <= layer.need_start(length) and held[i].end >= length
               for i, layer in layout.layers.items())


def cut_tails(session, length: int) -> dict:
    """The session's tails ending at ``length`` (rows past it dropped)."""
    return {i: t.keep(t.start, length) for i, t in tails(session).items() if t.start <= length}


def tail_bytes(session) -> int:
    return sum(t.rows.numel() * t.rows.element_size() for t in session.aux.get(TAILS, {}).values())

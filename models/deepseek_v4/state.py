"""What a DeepSeek V4 session holds: per token, in the block pool, and per session, the entries.

Per token and layer the pool holds (runtime dtype, one row of :attr:`TokenLayout.width` per token):

- ``kv``: the token's normed, rotated K=V vector (``head_dim``) -- its sliding-window key;
- HCA layers: the compressor's raw projections ``raw_kv``, ``raw_gate`` (``head_dim`` each);
- CSA layers: the compressor's raw projections (two series: ``2 * head_dim`` each) and the
  indexer's (``2 * index_dim`` each).

Everything else derives from these rows: a window's compressed entry is a function of its tokens'
raw projections (and, for CSA, the previous window's), so a session's entries are a cache
(``session.aux``) rebuilt from the pool at any length -- after a fork, a truncation or an import
at a length that is not a window multiple -- and the exported state is the per-token rows alone.
"""

from __future__ import annotations

from typing import Callable

import torch

from kvgate.core.runtime import Session
from kvgate.models.deepseek_v4.arch import CSA, HCA, DeepseekV4Arch

ENTRIES = "deepseek_v4_entries"  # session.aux key: {(layer, "kv" | "index"): EntryView}


class TokenLayout:
    """Where each layer's per-token fields sit in a token's pool row."""

    def __init__(self, arch: DeepseekV4Arch):
        self.fields: list[dict[str, slice]] = []
        offset = 0
        for kind in arch.kinds:
            widths = {"kv": arch.head_dim}
            if kind == HCA:
                widths.update(raw_kv=arch.head_dim, raw_gate=arch.head_dim)
            elif kind == CSA:
                widths.update(raw_kv=2 * arch.head_dim, raw_gate=2 * arch.head_dim,
                              index_kv=2 * arch.index_dim, index_gate=2 * arch.index_dim)
            fields = {}
            for name, width in widths.items():
                fields[name] = slice(offset, offset + width)
                offset += width
            self.fields.append(fields)
        self.width = offset

    def describe(self) -> str:
        return "+".join(str(f["kv"].stop - f["kv"].start + sum(s.stop - s.start for n, s in f.items() if n != "kv"))
                        for f in self.fields)


class EntryBuffer:
    """Entries of one layer shared by the sessions forked from one another: rows grow in place, up to
    ``high`` (the most any holder has written); a holder whose own count is below ``high`` while
    others hold the buffer copies its rows out before it appends (copy on write)."""

    def __init__(self, rows: torch.Tensor):
        self.data, self.high, self.holders = rows, rows.shape[0], 1

    def grow(self, rows: int) -> None:
        if rows > self.data.shape[0]:
            grown = self.data.new_empty((max(rows, 2 * self.data.shape[0], 16), self.data.shape[1]))
            grown[:self.high] = self.data[:self.high]
            self.data = grown


class EntryView:
    """A session's first ``count`` rows of an :class:`EntryBuffer`."""

    def __init__(self, buffer: EntryBuffer, count: int):
        self.buffer, self.count = buffer, count

    def rows(self) -> torch.Tensor:
        return self.buffer.data[:self.count]

    def append(self, rows: torch.Tensor) -> None:
        buffer = self.buffer
        if buffer.holders == 1:
            buffer.high = self.count
        elif self.count != buffer.high:
            buffer.holders -= 1
            self.buffer = buffer = EntryBuffer(buffer.data[:self.count].clone())
        buffer.grow(self.count + rows.shape[0])
        buffer.data[self.count:self.count + rows.shape[0]] = rows
        self.count += rows.shape[0]
        buffer.high = self.count

    def share(self, count: int) -> "EntryView":
        self.buffer.holders += 1
        return EntryView(self.buffer, min(count, self.count))


def cached_entries(session: Session) -> dict:
    return session.aux.setdefault(ENTRIES, {})


def entries(session: Session, key: tuple[int, str], count: int,
            build: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """The first ``count`` entries of ``key``: cached ones, plus ``build(first, count)`` for the rest."""
    cache = cached_entries(session)
    view = cache.get(key)
    if view is None:
        view = cache[key] = EntryView(EntryBuffer(build(0, count)), count)
    elif view.count < count:
        view.append(build(view.count, count))
    return view.rows()[:count]


def keep_entries(session: Session, length: int, rates: dict[int, int]) -> None:
    """Drop cached entries of windows not complete within the first ``length`` tokens."""
    for key, view in cached_entries(session).items():
        view.count = min(view.count, length // rates[key[0]])


def forked_entries(session: Session, length: int, rates: dict[int, int]) -> dict:
    """A fork's entry cache: the windows complete within its ``length`` tokens (rows shared)."""
    return {key: view.share(length // rates[key[0]]) for key, view in cached_entries(session).items()}


def release_entries(session: Session) -> None:
    for view in session.aux.pop(ENTRIES, {}).values():
        view.buffer.holders -= 1


def entry_bytes(session: Session) -> int:
    """The bytes of the entry buffers the session holds (shared ones included)."""
    return sum(v.buffer.data.numel() * v.buffer.data.element_size() for v in cached_entries(session).values())

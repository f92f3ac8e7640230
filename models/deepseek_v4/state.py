"""What a DeepSeek V4 session holds: per token in the block pool, per window and per session in
``session.aux``. Widths in elements of the runtime dtype; bytes at V4-Flash's size in bf16 (43
layers: 20 CSA, 23 HCA; ``head_dim`` 512, ``index_dim`` 128, rates 4 and 128).

- Per token, the pool row (:class:`TokenLayout`): each layer's normed, rotated K=V vector, its
  sliding-window key, ``layers * head_dim`` (V4-Flash: 44,032 B per token).
- Per window, the compressed entries, the state of record (:class:`EntryView` over an
  :class:`EntryBuffer` that forks share, copied on write): per ``csa_rate`` tokens a CSA layer's
  entry (``head_dim``) and indexer key (``index_dim``), per ``hca_rate`` tokens an HCA layer's entry
  (``head_dim``) (V4-Flash: 6,400 + 184 = 6,584 B per token).
- Per session, each compressed layer's raw tail (:mod:`.tail`): the raw projections of its open
  window (CSA: and of the window before), plus ``csa_rate`` spare tokens; at most
  ``hca_rate + csa_rate - 1`` rows of ``2 * head_dim`` (HCA) and ``3 * csa_rate - 1`` rows of
  ``4 * (head_dim + index_dim)`` (CSA) (V4-Flash: at most 6,170,624 + 1,126,400 B per session).

A window's entry is pooled from its tokens' raw projections once it completes and is never rebuilt
from them again; a cut back into a window whose raw rows the tail no longer holds replays the tokens
since the last boundary (:mod:`.replay`).
"""

from __future__ import annotations

import torch

from kvgate.core.runtime import Session
from kvgate.models.deepseek_v4.arch import DeepseekV4Arch

ENTRIES = "deepseek_v4_entries"  # session.aux key: {(layer, "kv" | "index"): EntryView}


class TokenLayout:
    """Where each layer's K=V vector sits in a token's pool row (``fields[layer]["kv"]``)."""

    def __init__(self, arch: DeepseekV4Arch):
        d = arch.head_dim
        self.fields = [{"kv": slice(i * d, (i + 1) * d)} for i in range(arch.layers)]
        self.width = arch.layers * d


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


def entry_view(session: Session, key: tuple[int, str], empty: torch.Tensor) -> EntryView:
    """The session's entries of ``key``, a new empty view (of ``empty`` [0, dims]) the first time."""
    views = cached_entries(session)
    if key not in views:
        views[key] = EntryView(EntryBuffer(empty), 0)
    return views[key]


def entry_count(session: Session, key: tuple[int, str]) -> int:
    view = session.aux.get(ENTRIES, {}).get(key)
    return 0 if view is None else view.count


def keep_entries(session: Session, length: int, rates: dict[int, int]) -> None:
    """Drop the entries of windows not complete within the first ``length`` tokens."""
    for key, view in cached_entries(session).items():
        view.count = min(view.count, length // rates[key[0]])


def forked_entries(session: Session, length: int, rates: dict[int, int]) -> dict:
    """A fork's entries: the windows complete within its ``length`` tokens (rows shared)."""
    return {key: view.share(length // rates[key[0]]) for key, view in cached_entries(session).items()}


def release_entries(session: Session) -> None:
    for view in session.aux.pop(ENTRIES, {}).values():
        view.buffer.holders -= 1


def entry_bytes(session: Session) -> int:
    """The bytes of the entry buffers the session holds (shared ones included)."""
    return sum(v.buffer.data.numel() * v.buffer.data.element_size() for v in cached_entries(session).values())

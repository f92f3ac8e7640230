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

ENTRIES = "deepseek_v4_entries"  # session.aux key: {(layer, "kv" | "index"): entries [count, dims]}


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


def cached_entries(session: Session) -> dict:
    return session.aux.setdefault(ENTRIES, {})


def entries(session: Session, key: tuple[int, str], count: int,
            build: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """The first ``count`` entries of ``key``: cached ones, plus ``build(first, count)`` for the rest."""
    cache = cached_entries(session)
    have = cache.get(key)
    held = 0 if have is None else have.shape[0]
    if have is None or held < count:
        new = build(held, count)
        have = new if have is None else torch.cat([have, new])
        cache[key] = have
    return have[:count]


def keep_entries(session: Session, length: int, rates: dict[int, int]) -> None:
    """Drop cached entries of windows not complete within the first ``length`` tokens."""
    cache = cached_entries(session)
    for key in list(cache):
        cache[key] = cache[key][:length // rates[key[0]]]


def forked_entries(session: Session, length: int, rates: dict[int, int]) -> dict:
    """A fork's entry cache: the windows complete within its ``length`` tokens (tensors shared)."""
    return {key: value[:length // rates[key[0]]] for key, value in cached_entries(session).items()}


def entry_bytes(session: Session) -> int:
    return sum(t.numel() * t.element_size() for t in cached_entries(session).values())

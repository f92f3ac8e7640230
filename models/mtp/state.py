"""What an MTP layer keeps per session (``Session.aux["mtp"]``).

MTP position ``i`` pairs the main model's hidden state at ``i`` with token ``i + 1``; its key and
value are kept once both are in the session (so they hold at positions < length - 1). The main
model's final hidden states of the latest positions are kept too (the newest is what the next
draft starts from; the others let a truncation by a rejected draft find its new newest one).

Exact under truncation and forks: a position's state depends only on the tokens up to ``i + 1``,
so cutting drops what lies past the cut and a fork copies what lies before it. A position whose
hidden state is gone (the session was cut before the kept tail, or its tokens came from an
imported chunk: chunks do not carry MTP state) is left out: the layer attends over the positions it
has. That only changes what is drafted, never the output (drafts are verified).
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

TAIL_ROWS = 64  # hidden states kept: more than a verifying forward appends


@attrs.define
class MtpState:
    keys: torch.Tensor  # [capacity, kv_heads, head_dim], the first `count` rows in use
    values: torch.Tensor
    positions: torch.Tensor  # [capacity] long, ascending
    count: int = 0
    tail: Optional[torch.Tensor] = None  # main hidden states [rows, hidden] of positions from tail_start
    tail_start: int = 0

    @classmethod
    def empty(cls, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> "MtpState":
        return cls(torch.empty(0, kv_heads, head_dim, dtype=dtype, device=device),
                   torch.empty(0, kv_heads, head_dim, dtype=dtype, device=device),
                   torch.empty(0, dtype=torch.long, device=device))

    def past(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[: self.count], self.values[: self.count]

    def append(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        end = self.count + keys.shape[0]
        if end > self.keys.shape[0]:
            capacity = max(end, 2 * self.keys.shape[0], 16)
            self.keys, self.values, self.positions = (_grown(t, capacity) for t in
                                                      (self.keys, self.values, self.positions))
        self.keys[self.count:end], self.values[self.count:end] = keys, values
        self.positions[self.count:end] = positions
        self.count = end

    def hidden_at(self, position: int) -> Optional[torch.Tensor]:
        """The main model's hidden state at ``position`` [1, hidden], when kept."""
        if self.tail is None or not self.tail_start <= position < self.tail_start + self.tail.shape[0]:
            return None
        return self.tail[position - self.tail_start: position - self.tail_start + 1]

    def keep_hidden(self, start: int, rows: torch.Tensor) -> None:
        """Hidden states of positions from ``start``, joined to the kept ones when they follow them."""
        if self.tail is not None and self.tail_start + self.tail.shape[0] == start:
            rows, start = torch.cat([self.tail, rows]), self.tail_start
        drop = max(rows.shape[0] - TAIL_ROWS, 0)
        self.tail, self.tail_start = (rows[drop:].clone() if drop else rows), start + drop

    def cut(self, length: int) -> None:
        """The state of the session cut to ``length`` tokens."""
        self.count = int((self.positions[: self.count] < length - 1).sum())
        if self.tail is not None:
            rows = max(min(length - self.tail_start, self.tail.shape[0]), 0)
            self.tail = self.tail[:rows] if rows else None

    def copy(self, length: int) -> "MtpState":
        """The state of a fork of the first ``length`` tokens (its own buffers)."""
        count = int((self.positions[: self.count] < length - 1).sum())
        out = MtpState(self.keys[:count].clone(), self.values[:count].clone(), self.positions[:count].clone(), count,
                       self.tail, self.tail_start)
        out.cut(length)
        return out


def _grown(tensor: torch.Tensor, capacity: int) -> torch.Tensor:
    out = tensor.new_empty((capacity,) + tuple(tensor.shape[1:]))
    out[: tensor.shape[0]] = tensor
    return out

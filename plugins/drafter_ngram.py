"""The n-gram drafter (prompt lookup): the tokens that followed the latest earlier occurrence of
the last n-gram of the prompt, output and forced tokens.

It drafts ``[engine] speculative_ngram`` tokens a step when that is > 0 and ``speculative`` names
no other drafter (``speculative = "ngram"`` names it).
"""

from __future__ import annotations

from typing import Optional

import attrs
import numpy as np

from kvgate.core.config import EngineConfig
from kvgate.core.engine.sequence import Sequence
from kvgate.core.hookspecs import hookimpl
from kvgate.core.runtime import ModelRuntime

NAME = "ngram"
NGRAM = 3


def propose_ngram(tokens: list[int], max_draft: int, ngram: int = NGRAM) -> list[int]:
    """Tokens that followed the latest earlier occurrence of the last ``n`` tokens (n = ngram..1)."""
    if max_draft <= 0 or len(tokens) < 2:
        return []
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(ngram, len(tokens) - 1), 0, -1):
        tail = arr[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in arr[start:start + max_draft]]
    return []


@attrs.frozen
class NgramDrafts:
    """Prompt lookup over prompt + output + forced tokens."""

    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        return propose_ngram(seq.prompt + seq.output + forced, count)

    def max_draft(self, config: EngineConfig) -> int:
        return config.speculative_ngram


def build_ngram_drafter(runtime: Optional[ModelRuntime], config: EngineConfig) -> Optional[NgramDrafts]:
    if config.speculative not in ("", NAME):
        return None  # another drafter is named
    if config.speculative_ngram > 0:
        return NgramDrafts()
    if config.speculative == NAME:
        raise ValueError('[engine] speculative = "ngram" needs speculative_ngram > 0 (the draft length)')
    return None


@hookimpl
def register_drafters(register):
    register(NAME, build_ngram_drafter)

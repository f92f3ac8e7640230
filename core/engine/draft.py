"""Where speculative drafts come from, and how a draft is cut to what the fence allows.

A :class:`DraftSource` proposes a continuation of a running sequence: :class:`NgramDrafts` (prompt
lookup: the tokens that followed the latest earlier occurrence of the last n-gram) or
:class:`HeadDrafts` (the model's own draft layers, a :class:`kvgate.core.runtime.DraftHead`: GLM-4.5's
MTP layer). :func:`draft_for` puts the tokens the fence forces first (they need no logit work: the
grammar allows nothing else), asks the source for the rest and cuts the draft at the first token a
clone of the fence refuses, or at a stop token.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np

from kvgate.core.engine.sequence import Sequence
from kvgate.core.runtime import DraftHead

NGRAM = 3


class DraftSource(Protocol):
    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        """Up to ``count`` tokens expected after the sequence's output and the ``forced`` tokens."""


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


@attrs.frozen
class HeadDrafts:
    """The model's draft head. It drafts from the last verified position only, so behind forced
    tokens (not in the session yet) it proposes nothing: the forced run is the whole draft."""

    head: DraftHead

    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        if forced or count <= 0 or seq.session is None:
            return []
        return self.head.draft(seq.session, seq.output[-1], count)


def draft_for(seq: Sequence, max_draft: int, room: int,
              source: DraftSource = NgramDrafts()) -> tuple[list[int], int]:
    """(draft, how many of its first tokens the fence forces), checked against a fence clone."""
    limit = min(max_draft, room)
    if limit <= 0:
        return [], 0
    fence = seq.fence
    forced = list(fence.forced_tokens()[:limit]) if fence is not None else []
    draft = forced + source.propose(seq, forced, limit - len(forced))
    if len(draft) == len(forced):
        return draft, len(forced)
    check = fence.clone() if fence is not None else None
    for token in forced:
        check.advance(token)
    for index in range(len(forced), len(draft)):
        if draft[index] in seq.stop_token_ids:
            return draft[:index], len(forced)
        if check is not None:
            check.set_budget(seq.budget_left() - index)
            if not check.allows(draft[index]):
                return draft[:index], len(forced)
            check.advance(draft[index])
    return draft, len(forced)

"""Which waiting prompt prefills next, and how many of its tokens one forward takes.

A forward cannot be split once it runs, so its length bounds how long everything else waits: a
request that arrives during an 8,192-token forward waits for all of it. The schedule therefore
(a) takes the waiting prompts in turn, one chunk each, the one prefilled least so far first (a
new arrival goes next), so a short prompt is never stuck behind a long one, and (b) paces chunks
by time:

* a fresh prompt with nothing else waiting or decoding may run in one forward of up to
  ``prefill_alone`` tokens: fewer, larger products (measured 4-6 % faster than chunks of 512 at
  2,000-3,000 tokens on CPU, even at 8,000), but only as many as the measured prefill speed fits
  in ``slice_s`` seconds (on a GPU thousands of tokens, on a CPU often just ``prefill_chunk``);
* otherwise, and for appends after a cached prefix (off CPU their attention mask grows with the
  chunk), ``prefill_chunk`` tokens.

Pacing never goes below ``prefill_chunk``: smaller forwards are mostly fixed cost, and on a busy
CPU they would multiply the long prompt's prefill time. Until a speed is measured a forward takes
``prefill_chunk`` tokens. Chunk boundaries do not change results: the deterministic runtime mode
is split-invariant.
"""

from __future__ import annotations

from typing import Optional

from kvgate.core.config import EngineConfig
from kvgate.core.engine.sequence import Sequence

PREFILL_SLICE_S = 0.5  # the longest a forward past prefill_chunk tokens should hold the engine
MEASURED_FROM_TOKENS = 32  # a shorter forward (a short prompt's) is mostly fixed cost: no measure of speed


class PrefillPace:
    """Seconds per prompt token of recent forwards (a moving average), and the tokens that fit a
    time slice. ``slice_s`` None: no pacing (the config's sizes alone)."""

    def __init__(self, slice_s: Optional[float] = PREFILL_SLICE_S):
        self.slice_s = slice_s
        self.seconds_per_token: Optional[float] = None

    def record(self, tokens: int, seconds: float) -> None:
        if tokens < MEASURED_FROM_TOKENS or seconds <= 0:
            return
        latest = seconds / tokens
        previous = self.seconds_per_token
        self.seconds_per_token = latest if previous is None else (previous + latest) / 2

    def bound(self, tokens: int, floor: int) -> int:
        """``tokens`` held to what fits the slice, never below ``floor`` (``floor`` itself while no
        speed is known)."""
        if self.slice_s is None or tokens <= floor:
            return tokens
        if self.seconds_per_token is None:
            return floor
        return max(floor, min(tokens, int(self.slice_s / self.seconds_per_token)))


class PrefillSchedule:
    """Turns over the prompts waiting to prefill, one paced chunk per engine turn."""

    def __init__(self, config: EngineConfig, pace: PrefillPace):
        self.config = config
        self.pace = pace

    def next_chunk(self, prefilling: list[Sequence], decoding: int) -> tuple[Sequence, int]:
        """(the sequence to prefill now, tokens for its forward): of ``prefilling`` (in arrival
        order, not empty) the first of those prefilled least so far."""
        seq = min(prefilling, key=lambda waiting: waiting.prefilled)
        config = self.config
        alone = not decoding and len(prefilling) == 1 and not seq.computed
        limit = config.prefill_alone if alone and config.prefill_alone > config.prefill_chunk else config.prefill_chunk
        return seq, self.pace.bound(limit, config.prefill_chunk)

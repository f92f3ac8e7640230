"""Loop guard: stops a generation from repeating itself.

Detects, on the tokens chosen so far:

* one token repeated ``max_token_repeats`` times in a row -> that token is excluded next (a run
  never grows longer than ``max_token_repeats``);
* a pattern of period ``p`` in ``2..max_pattern_period`` about to complete its ``n``-th repetition
  -> the token that would complete it is excluded (periods that are multiples of a shorter
  detected period are left to the shorter one). Short periods need ``n = min_pattern_repeats``;
  a longer one needs only as many as cover ``LOOP_TOKENS`` tokens, and never fewer than
  ``LONG_REPEATS`` (a ~20-token JSON object written out five times over is a loop; three
  identical lines of code may be what was asked for);
* a restart of the reasoning: inside reasoning, the opening tokens of the reasoning recur ->
  the end of reasoning is forced; after reasoning closed, re-opening it is excluded;
* a loop that comes back despite the exclusions (:class:`~kvgate.plugins.loop_stop.LoopEnd`:
  ``stop_after_interventions`` exclusions within ``stop_window`` output tokens) -> the reply ends
  (``ends_reply``; the fence ends it once no call is open). Inside reasoning the end of reasoning
  is forced instead, and the answer is counted afresh.

Its settings are the ``[guard]`` section (:class:`GuardConfig`), declared by this plugin.
"""

from __future__ import annotations

import copy
from typing import Optional

import attrs

from kvgate.core.config_fields import non_negative, positive
from kvgate.core.hookspecs import hookimpl
from kvgate.plugins.loop_stop import LoopEnd

RESTART_WINDOW = 16  # tokens: the opening of the reasoning that must not recur
LOOP_TOKENS = 96  # a repeated stretch this long is a loop once it holds LONG_REPEATS copies
LONG_REPEATS = 4


def repeats_needed(period: int, min_repeats: int) -> int:
    """Copies of a pattern of ``period`` tokens that make a loop."""
    return min(min_repeats, max(LONG_REPEATS, -(-LOOP_TOKENS // period)))


@attrs.define
class GuardConfig:
    """The ``[guard]`` section."""

    enabled: bool = True
    max_token_repeats: int = attrs.field(default=32, validator=positive)
    max_pattern_period: int = attrs.field(default=32, validator=positive)
    min_pattern_repeats: int = attrs.field(default=8, validator=positive)
    stop_after_interventions: int = attrs.field(default=3, validator=non_negative)  # 0: never end a reply
    stop_window: int = attrs.field(default=512, validator=positive)


class LoopGuard:
    def __init__(self, setup, config: GuardConfig):
        self.max_repeats = config.max_token_repeats
        self.max_period = config.max_pattern_period
        self.needed = [0] + [repeats_needed(p, config.min_pattern_repeats) for p in range(1, self.max_period + 1)]
        self.info = setup.info
        self.open_bytes = setup.think_open.encode("utf-8")
        self.close_bytes = setup.think_close.encode("utf-8")
        self.close_tokens = setup.info.encode(setup.think_close) if setup.think_close else []
        self.in_reasoning = setup.in_reasoning and bool(self.close_tokens)
        self.tokens: list[int] = []
        self.runs = [0] * (self.max_period + 1)  # runs[p]: trailing positions with t[i] == t[i - p]
        self.tail = b""
        self.opening: list[int] = []
        self.queue: list[int] = []
        self.loop_end = LoopEnd(config.stop_after_interventions, config.stop_window)

    def clone(self) -> "LoopGuard":
        twin = copy.copy(self)
        twin.tokens, twin.runs, twin.opening, twin.queue = (
            list(self.tokens), list(self.runs), list(self.opening), list(self.queue))
        twin.loop_end = self.loop_end.clone()
        return twin

    # ---- state

    def advance(self, token: int) -> None:
        tokens = self.tokens
        if self._loop_bans():
            self.loop_end.record(len(tokens))
        for period in range(1, self.max_period + 1):
            same = len(tokens) >= period and tokens[-period] == token
            self.runs[period] = self.runs[period] + 1 if same else 0
        tokens.append(token)
        if self.queue and self.queue[0] == token:
            self.queue.pop(0)
        self._track_reasoning(token)

    def _track_reasoning(self, token: int) -> None:
        if not self.close_bytes:
            return
        piece = self.info.token_bytes()[token] if 0 <= token < self.info.vocab_size else b""
        keep = max(len(self.open_bytes), len(self.close_bytes))
        self.tail = (self.tail + piece)[-keep:]
        if self.in_reasoning:
            if len(self.opening) < RESTART_WINDOW:
                self.opening.append(token)
            if self.tail.endswith(self.close_bytes):
                self.in_reasoning, self.queue = False, []
                self.loop_end.forget()
        elif self.open_bytes and self.tail.endswith(self.open_bytes):
            self.in_reasoning, self.opening = True, []

    # ---- decisions

    def banned(self) -> list[int]:
        return self._loop_bans() + self._reopening()

    def _loop_bans(self) -> list[int]:
        """The token that would lengthen a run past ``max_token_repeats`` or complete a loop."""
        tokens = self.tokens
        out: list[int] = []
        if tokens and self.runs[1] + 1 >= self.max_repeats:
            out.append(tokens[-1])
        return out + self._pattern_successor()

    def ends_reply(self) -> bool:
        """The loop came back despite the exclusions (outside reasoning): the reply should end."""
        return self.loop_end.reached() and not self.in_reasoning

    def _pattern_successor(self) -> list[int]:
        tokens = self.tokens
        for period in range(2, min(self.max_period, len(tokens)) + 1):
            covered = self.runs[period] + period
            if covered < period * self.needed[period] - 1:
                continue
            if any(period % d == 0 and self.runs[d] + d >= covered for d in range(1, period)):
                continue
            return [tokens[-period]]
        return []

    def _reopening(self) -> list[int]:
        """After reasoning closed, the token that would complete a new opening tag."""
        if self.in_reasoning or not self.open_bytes or not self.close_bytes:
            return []
        pieces = self.info.token_bytes()
        for size in range(1, len(self.open_bytes)):
            if self.tail.endswith(self.open_bytes[:size]):
                rest = self.open_bytes[size:]
                return [t for t in self.info.encode(rest.decode("utf-8", "ignore"))[:1] if pieces[t] == rest]
        return []

    def forced(self) -> list[int]:
        if self.queue:
            return list(self.queue)
        window = len(self.opening)
        if self.in_reasoning and self.close_tokens and self.loop_end.reached():
            self.queue = list(self.close_tokens)
            return list(self.queue)
        if (self.in_reasoning and window == RESTART_WINDOW and len(self.tokens) > 2 * window
                and self.tokens[-window:] == self.opening):
            self.queue = list(self.close_tokens)
            return list(self.queue)
        return []


def build_loop_guard(setup) -> Optional[LoopGuard]:
    """A fresh loop guard for one request, or None when ``[guard] enabled`` is false."""
    config = setup.config.section("guard")
    return LoopGuard(setup, config) if config.enabled else None


@hookimpl
def register_generation_guards(register):
    register("loop_guard", build_loop_guard)


@hookimpl
def register_config_sections(register):
    register("guard", GuardConfig)

"""What the token budget allows: closing an open structure in time, no new call without room.

A call cut off by ``max_tokens`` is an invalid call, so the fence keeps an invariant: once the
budget left is within ``TIGHT_MARGIN`` tokens of the closing path's length (the tight zone), every
token taken keeps ``len(closing path after it) <= budget left after it``. The closing path is a
list of tokens that takes the grammar state to one where the output may end (see
:mod:`kvgate.core.fence.closing`); in the tight zone it is always known for the current state:

* taking its first token leaves the rest of it, which still fits (the fallback that keeps the
  invariant by construction);
* any other token is tried on a copy of the grammar state (:meth:`BudgetPlan.fits`): the old path
  still valid after it, else a fresh walk; it is allowed only when that path fits. Whatever
  token is taken, the path after it is the one verified, so it never goes stale;
* when the path is exactly as long as the budget left, it is forced (``closing``) to the end.

Outside the tight zone the path is measured only at budgets that shrink the gap to it by a
quarter each time (nothing extra per step in between): a path grows by at most a few tokens per
token written, so the zone is entered while the path still fits.

Also: once a call closed, the output stops when another complete call cannot fit; in free text
the trigger may not complete when a call could not fit. A call counts as opened (``entered``) when
the output starts with one (``required``) or the answer wrote the trigger: a grammar that is not
accepting is not enough, since free text is not accepting inside a character split over tokens,
nor while reasoning.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from kvgate.core.fence.closing import Closer
from kvgate.core.fence.tokens import tokens_starting_with

CALL_SLACK = 2  # a second call needs its shortest length plus this
TIGHT_MARGIN = 24  # within this many tokens of the closing path's length, every token is checked
SCHEDULE_SHARE = 4  # outside the zone, measure again once a quarter of the gap (beyond it) is spent


class BudgetPlan:
    """Per-request budget state; ``clone`` copies it (paths are never mutated in place)."""

    def __init__(self, closer: Closer, prefer: Optional[np.ndarray], trigger: str, call_cost: Optional[int],
                 mode: str = "auto", start_in: str = "content"):
        self.closer = closer
        self.prefer = prefer  # tokens that start required parameter names
        self.trigger = trigger.encode("utf-8")
        self.call_cost = call_cost  # tokens of the shortest complete call (None: no second call)
        self.entered = mode == "required"  # a call has been opened
        self.answering = start_in != "reasoning"  # past the reasoning (the grammar accepted once)
        self.reasoning = start_in == "reasoning"  # inside the reasoning: its closing tag not yet written
        self.closing: list[int] = []  # the forced rest of the closing path
        self.tail = b""  # the end of the output (a closing tag may be half written)
        self.next_check: Optional[int] = None  # outside the zone: the budget at which to measure
        self.tight = False
        self.path: Optional[list[int]] = None  # in the zone: the closing path from this state
        self.verified: dict[int, list[int]] = {}  # token -> the path after it (this position)

    def clone(self) -> "BudgetPlan":
        twin = BudgetPlan.__new__(BudgetPlan)
        twin.__dict__.update(self.__dict__)
        twin.closing = list(self.closing)
        twin.verified = dict(self.verified)
        return twin

    def advance(self, token: int, matcher) -> None:
        if self.closing:
            self.closing = self.closing[1:] if self.closing[0] == token else []
        if self.tight:
            if self.path and self.path[0] == token:
                self.path = self.path[1:]
            else:
                self.path = self.verified.get(token)  # None: planned again before the next token
        self.verified = {}
        pieces = self.closer.info.token_bytes()
        piece = pieces[token] if 0 <= token < len(pieces) else b""
        self.tail = (self.tail + piece)[-64:]
        if self.reasoning and self.closer.reasoning_close and self.closer.reasoning_close in self.tail:
            self.reasoning = False
        accepting = matcher.is_accepting()
        if not self.entered and self.answering and not accepting and self.wrote_trigger(len(piece)):
            self.entered = True
        self.answering = self.answering or accepting

    def wrote_trigger(self, written: int) -> bool:
        """The last ``written`` bytes of the output completed the trigger."""
        if not self.trigger or written == 0:
            return False
        return self.trigger in self.tail[-(written + len(self.trigger) - 1):]

    # ---- the closing invariant

    def prepare(self, matcher, budget: Optional[int]) -> Optional[int]:
        """Measure when due; the next token of a forced closing path, when one is forced."""
        if budget is None:
            return None
        if self.closing:
            return self.closing[0]
        if matcher.is_accepting():
            self.path = [] if self.tight else None
            return None
        if not self.tight:
            if self.next_check is not None and budget > self.next_check:
                return None
            self.measure(matcher, budget)
        if self.tight and self.path is None:
            self.path = self.closer.path(matcher, prefer=self.prefer, tail=self.tail, reasoning=self.reasoning)
        if self.tight and self.path and len(self.path) >= budget:
            self.closing = list(self.path)
            return self.closing[0]
        return None

    def measure(self, matcher, budget: int) -> None:
        path = self.closer.path(matcher, prefer=self.prefer, tail=self.tail, reasoning=self.reasoning)
        if path is None:
            self.next_check = budget - 1
            return
        gap = budget - len(path)
        if gap <= TIGHT_MARGIN:
            self.tight, self.path = True, path
        else:
            self.next_check = budget - max(1, (gap - TIGHT_MARGIN) // SCHEDULE_SHARE)

    def due(self, matcher, budget: int) -> bool:
        """The next token needs the budget's attention (a forced close, the zone, a measurement)."""
        if self.closing or self.tight:
            return True
        return not matcher.is_accepting() and (self.next_check is None or budget <= self.next_check)

    def in_force(self) -> bool:
        """Tokens are checked one by one (the tight zone, with a known path and no forced close)."""
        return self.tight and self.path is not None and not self.closing

    def fits(self, matcher, token: int, budget: int) -> bool:
        """Whether the closing path after ``token`` fits the budget left after it (tight zone)."""
        if self.path is None or (self.path and token == self.path[0]) or token in self.verified:
            return True
        state = matcher.copy()
        if not state.consume(token):
            return False
        room = budget - 1
        path = self.path if len(self.path) <= room and reaches_end(state, self.path) else None
        if path is None:
            tail = (self.tail + self.closer.info.token_bytes()[token])[-64:]
            reasoning = self.reasoning and self.closer.reasoning_close not in tail
            path = self.closer.path(state, limit=room + 1, prefer=self.prefer, tail=tail, reasoning=reasoning)
        if path is None or len(path) > room:
            return False
        self.verified[token] = path
        return True

    def run_on_path(self, forced: list[int]) -> list[int]:
        """The part of a forced run that follows the closing path (its state after is known)."""
        if not self.tight or self.path is None:
            return forced
        count = 0
        while count < min(len(forced), len(self.path)) and forced[count] == self.path[count]:
            count += 1
        return forced[:count]

    def unchecked_run(self, matcher, budget: int) -> int:
        """How many tokens may pass before the path must be measured (a forced run that
        speculation takes without logits stops there)."""
        if matcher.is_accepting() or self.tight:
            return budget
        if self.next_check is None:
            return 0
        return max(0, budget - self.next_check)

    # ---- room for another call

    def no_room_for_a_call(self, budget: Optional[int]) -> bool:
        return budget is not None and self.call_cost is not None and budget < self.call_cost + CALL_SLACK

    def must_stop(self, matcher, budget: Optional[int]) -> bool:
        return self.entered and self.no_room_for_a_call(budget) and matcher.is_accepting()

    def trigger_bans(self, budget: Optional[int]) -> list[int]:
        """Tokens that would complete the trigger, when in free text without room for a call."""
        if self.entered or not self.trigger or not self.no_room_for_a_call(budget):
            return []
        out: list[int] = []
        for done in range(len(self.trigger)):
            if self.tail.endswith(self.trigger[:done]):
                out += tokens_starting_with(self.closer.info, self.trigger[done:])
        return out


def reaches_end(state, path: list[int]) -> bool:
    """Whether ``path`` takes ``state`` (consumed) to a state where the output may end."""
    if state.allows(path) != len(path):
        return False
    probe = state.copy()
    for token in path:
        probe.consume(token)
    return probe.is_accepting()

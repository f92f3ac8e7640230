"""What the token budget allows: closing an open structure in time, no new call without room.

* An open structure is closed before ``max_tokens`` runs out: closing paths are planned (see
  :mod:`kvgate.core.fence.closing`) at budgets that halve the gap to the last path's length, and
  forced once the remaining budget is no longer than the path (plus a little slack).
* Once a structure closed, the output stops when another complete call cannot fit.
* Near the end of the budget, a choice (few allowed tokens: a parameter name, an optional
  member) that would make the closing path longer than the budget left is excluded: one token
  can open a whole optional field, which the halving schedule alone would not see in time.
* In free text, the trigger may not complete when a call could not fit: a call cut off by the
  token limit would be an invalid call.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from kvgate.core.fence.closing import Closer
from kvgate.core.fence.tokens import tokens_starting_with

CLOSE_SLACK = 2  # force the closing path once the budget is this close to its length
AFFORD_MARGIN = 32  # this close to the closing path's length, choices are checked to fit
AFFORD_SET = 64  # ... where at most this many tokens are allowed (a choice, not free text)


class BudgetPlan:
    """Per-request budget state; ``clone`` copies it (paths are immutable lists)."""

    def __init__(self, closer: Closer, prefer: Optional[np.ndarray], trigger: str, call_cost: Optional[int]):
        self.closer = closer
        self.prefer = prefer  # tokens that start required parameter names
        self.trigger = trigger.encode("utf-8")
        self.call_cost = call_cost  # tokens of the shortest complete call (None: no second call)
        self.entered = False  # a structure has been opened (the grammar was not accepting once)
        self.closing: list[int] = []
        self.tail = b""  # the end of the output (a closing tag may be half written)
        self.next_check: Optional[int] = None
        self.last_path: Optional[int] = None  # length of the latest planned closing path

    def clone(self) -> "BudgetPlan":
        twin = BudgetPlan.__new__(BudgetPlan)
        twin.__dict__.update(self.__dict__)
        twin.closing = list(self.closing)
        return twin

    def advance(self, token: int, matcher) -> None:
        if self.closing:
            self.closing = self.closing[1:] if self.closing[0] == token else []
        pieces = self.closer.info.token_bytes()
        if 0 <= token < len(pieces):
            self.tail = (self.tail + pieces[token])[-64:]
        if not self.entered and not matcher.is_accepting():
            self.entered = True

    def no_room_for_a_call(self, budget: Optional[int]) -> bool:
        return budget is not None and self.call_cost is not None and budget < self.call_cost + CLOSE_SLACK

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

    def unchecked_run(self, matcher, budget: int) -> int:
        """How many tokens may pass before the closing path must be checked again (a forced run
        that speculation takes without logits stops there)."""
        if matcher.is_accepting():
            return budget
        if self.next_check is None:
            return 0
        return max(0, budget - self.next_check)

    def closing_token(self, matcher, budget: Optional[int]) -> Optional[int]:
        """The next token of a forced closing path, once the budget leaves no room for more."""
        if budget is None:
            return None
        if self.closing:
            return self.closing[0]
        if matcher.is_accepting() or (self.next_check is not None and budget > self.next_check):
            return None
        path = self.closer.path(matcher, prefer=self.prefer, tail=self.tail)
        if path is None:
            self.next_check = budget - CLOSE_SLACK
            return None
        self.last_path = len(path)
        gap = budget - len(path) - CLOSE_SLACK
        if gap > 0:
            self.next_check = len(path) + CLOSE_SLACK + gap // 2
            return None
        self.closing = path
        return path[0] if path else None

    def unaffordable(self, matcher, allowed: Optional[np.ndarray], budget: Optional[int]) -> list[int]:
        """Allowed tokens after which the closing path no longer fits the budget left."""
        if budget is None or allowed is None or self.closing or self.last_path is None:
            return []
        if budget - self.last_path > AFFORD_MARGIN or matcher.is_accepting():
            return []
        ids = np.flatnonzero(allowed)
        if not 1 < ids.size <= AFFORD_SET:
            return []
        pieces = self.closer.info.token_bytes()
        out = []
        for token in ids.tolist():
            state = matcher.copy()
            if token >= len(pieces) or not state.consume(token):
                continue
            path = self.closer.path(state, limit=budget, prefer=self.prefer, tail=(self.tail + pieces[token])[-64:])
            if path is None or len(path) > budget - 1:
                out.append(token)
        return out

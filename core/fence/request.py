"""The per-request token fence: grammar matcher + narrowing guards + budget closing.

The engine calls, per decode position: ``set_budget(remaining)``, ``apply(logits)`` (in place:
disallowed tokens -> -inf), samples, then ``advance(token)``. Every path (ordinary decode, every
batch row, draft proposal and speculative verification) uses this same state; drafts are checked
on a ``clone()`` and the real fence then takes the clone's state for the accepted prefix
(``take_state``).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import numpy as np
import torch

from kvgate.core.fence.closing import Closer
from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.mask import bitmask_words, narrow, only, unpack, write_mask
from kvgate.core.fence.tokens import tokens_starting_with

CLOSE_HORIZON = 48  # draft checks compute full masks within this many tokens of the budget's end
CLOSE_SLACK = 2  # force the closing path once the budget is this close to its length


class RequestFence:
    def __init__(self, vocab: int, matcher: Any = None, guards: Optional[list] = None,
                 closer: Optional[Closer] = None, stop_ids: tuple[int, ...] = (),
                 prefer: Optional[np.ndarray] = None, trigger: str = "", call_cost: Optional[int] = None):
        self.vocab = vocab
        self.matcher = matcher
        self.guards = list(guards or [])
        self.closer = closer
        self.stop_ids = stop_ids
        self.prefer = prefer  # tokens that start required parameter names (for closing paths)
        self.trigger = trigger.encode("utf-8")
        self.call_cost = call_cost  # tokens of the shortest complete call (None: unknown / not needed)
        self._entered = False  # a structure has been opened (the grammar was not accepting once)
        self.budget: Optional[int] = None
        self.position = 0
        self._interventions = 0
        self._intervened_at = -1
        self._closing: list[int] = []
        self._tail = b""
        self._next_check: Optional[int] = None  # budget at which to plan a closing path again  # the last bytes of the output (closing tags may be half written)
        self._bits = np.zeros(bitmask_words(vocab), dtype=np.int32)

    # ---- the engine's interface

    def set_budget(self, remaining_tokens: int) -> None:
        self.budget = int(remaining_tokens)

    def apply(self, logits: torch.Tensor) -> None:
        write_mask(logits, self.allowed())

    def advance(self, token: int) -> None:
        if token in self.stop_ids and self.matcher is not None:
            if not self.matcher.is_accepting():
                raise FenceError(f"end-of-turn token {token} was chosen while a structure is open")
        elif self.matcher is not None and not self.matcher.consume(int(token)):
            raise FenceError(f"token {token} was chosen outside the fence ({self.matcher.error() or 'not allowed'})")
        for guard in self.guards:
            guard.advance(int(token))
        if self._closing:
            self._closing = self._closing[1:] if self._closing[0] == token else []
        if self.closer is not None and 0 <= token < self.vocab:
            self._tail = (self._tail + self.closer.info.token_bytes()[token])[-64:]
        if self._intervened_at == self.position:
            self._interventions += 1
        self.position += 1
        if self.budget is not None:
            self.budget -= 1
        if self.matcher is not None and not self._entered and not self.matcher.is_accepting():
            self._entered = True

    def forced_tokens(self) -> list[int]:
        if self.matcher is None:
            return []
        if self._closing:
            return list(self._closing)
        forced = self.matcher.forced_tokens()
        return forced[: self.budget] if self.budget is not None else forced

    def clone(self) -> "RequestFence":
        twin = copy.copy(self)
        twin.matcher = self.matcher.copy() if self.matcher is not None else None
        twin.guards = [guard.clone() for guard in self.guards]
        twin._closing = list(self._closing)
        twin._bits = np.zeros_like(self._bits)
        return twin

    def take_state(self, other: "RequestFence") -> None:
        """Become ``other`` (a clone advanced by the accepted draft); ``other`` is consumed."""
        self.__dict__.update(other.__dict__)

    @property
    def must_stop(self) -> bool:
        """The output must end now: nothing may follow, or a closed call leaves no room for another."""
        if self.matcher is None:
            return False
        if self.matcher.is_stopped():
            return True
        return self._entered and self._no_room_for_a_call() and self.matcher.is_accepting()

    def _no_room_for_a_call(self) -> bool:
        return self.budget is not None and self.call_cost is not None and self.budget < self.call_cost + CLOSE_SLACK

    @property
    def interventions(self) -> int:
        return self._interventions

    # ---- the allowed set

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next (cheap: no full mask unless the budget is nearly spent)."""
        if not 0 <= token < self.vocab:
            return False
        if self._closing or (self.budget is not None and self.budget <= CLOSE_HORIZON):
            mask = self.allowed()
            return mask is None or bool(mask[token])
        if self.matcher is not None:
            ok = self.matcher.is_accepting() if token in self.stop_ids else self.matcher.allows([token]) == 1
            if not ok:
                return False
        for guard in self.guards:
            forced = guard.forced()
            if forced:
                return token == forced[0]
            if token in guard.banned():
                return False
        return True

    def allowed(self) -> Optional[np.ndarray]:
        """The allowed set at this position (None: every token)."""
        mask = None
        if self.matcher is not None:
            self.matcher.fill_mask(self._bits)
            mask = unpack(self._bits, self.vocab)
        closing = self._closing_token(mask)
        if closing is not None:
            return only(closing, self.vocab)
        if mask is not None and not self._entered and self._no_room_for_a_call():
            mask, _ = narrow(mask, self._trigger_completions(), self.vocab)
        return self._guarded(mask)

    def _trigger_completions(self) -> list[int]:
        """Tokens that would complete the trigger given the output's tail (no room for a call)."""
        if not self.trigger or self.closer is None:
            return []
        info = self.closer.info
        out: list[int] = []
        for done in range(len(self.trigger)):
            if self._tail.endswith(self.trigger[:done]):
                out += tokens_starting_with(info, self.trigger[done:])
        return out

    def _guarded(self, mask: Optional[np.ndarray]) -> Optional[np.ndarray]:
        for guard in self.guards:
            forced = guard.forced()
            if forced and (mask is None or mask[forced[0]]):
                self._intervened_at = self.position
                return only(forced[0], self.vocab)
        for guard in self.guards:
            mask, removed = narrow(mask, guard.banned(), self.vocab)
            if removed:
                self._intervened_at = self.position
        return mask

    def _closing_token(self, mask: Optional[np.ndarray]) -> Optional[int]:
        """The next token of a forced closing path, once the budget leaves no room for more.

        Paths are computed at budgets that halve the gap to the last path's length, so a long
        generation computes only a handful of them."""
        if self.matcher is None or self.closer is None or self.budget is None:
            return None
        if self._closing:
            return self._closing[0]
        if self.matcher.is_accepting() or (self._next_check is not None and self.budget > self._next_check):
            return None
        path = self.closer.path(self.matcher, prefer=self.prefer, tail=self._tail)
        if path is None:
            self._next_check = self.budget - CLOSE_SLACK
            return None
        gap = self.budget - len(path) - CLOSE_SLACK
        if gap > 0:
            self._next_check = len(path) + CLOSE_SLACK + gap // 2
            return None
        self._closing = path
        return path[0] if path else None

"""The per-request token fence: grammar matcher + budget plan + narrowing guards.

The engine calls, per decode position: ``set_budget(remaining)``, ``apply(logits)`` (in place:
disallowed tokens -> -inf; mask refiners, :mod:`kvgate.core.fence.refiners`, may move a removed
token's logit onto a kept one), samples, then ``advance(token)``. Every
path (ordinary decode, every batch row, draft proposal and speculative verification) uses this
same state; drafts are checked on a ``clone()`` and the real fence then takes the clone's state
for the accepted prefix (``take_state``). Guards and the budget only narrow the grammar's set, never empty it.
In the budget's tight zone (:mod:`kvgate.core.fence.budget`) ``apply`` keeps only tokens after which
the closing path still fits (:mod:`kvgate.core.fence.invariant`), and ``allows`` checks a draft
token the same way, so drafts and every batch row keep the same invariant.
"""

from __future__ import annotations

import copy
from typing import Any, Optional, Sequence

import numpy as np
import torch

from kvgate.core.fence.budget import BudgetPlan
from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.invariant import keep_fitting
from kvgate.core.fence.mask import bitmask_words, narrow, only, unpack, write_mask

FULL_CHECK_BUDGET = 48  # near the budget's end a draft token is checked against the full mask
RECENT_TOKENS = 4


class RequestFence:
    def __init__(self, vocab: int, matcher: Any = None, guards: Optional[list] = None,
                 plan: Optional[BudgetPlan] = None, stop_ids: tuple[int, ...] = (), refiners: Sequence[Any] = ()):
        self.vocab = vocab
        self.matcher = matcher
        self.refiners = list(refiners) if matcher is not None else []  # refiners.MaskRefiner
        self.recent: tuple[int, ...] = ()  # the last output tokens (what forced text may merge with)
        self.guards = list(guards or [])
        self.plan = plan if matcher is not None else None
        self.stop_ids = stop_ids
        self.budget: Optional[int] = None
        self.position = 0
        self._interventions = 0
        self._intervened_at = -1
        self._bits = np.zeros(bitmask_words(vocab), dtype=np.int32)
        self._row: Optional[torch.Tensor] = None  # masked()'s copy of the logits, kept from step to step
        self.relaxed: list[str] = []  # schema keywords the fence does not enforce (see schema_preparer)

    # ---- the engine's interface

    def set_budget(self, remaining_tokens: int) -> None:
        """Tokens the output may still take, this one included (the engine calls it every step)."""
        self.budget = int(remaining_tokens)

    def apply(self, logits: torch.Tensor) -> None:
        mask = self._candidates()
        if self._forcing(mask):
            write_mask(logits, mask)
            return
        for refiner in self.refiners if mask is not None else ():
            mask = refiner.refine(logits, mask, self.matcher, self.recent)
        if self.plan is not None and self.plan.in_force():
            mask = keep_fitting(self.plan, self.matcher, mask, logits, self.budget, self.stop_ids)
        write_mask(logits, mask)

    def masked(self, logits: torch.Tensor) -> torch.Tensor:
        """:meth:`apply` on a copy of ``logits``, which stays as it is. Without a grammar, where
        nothing is taken away this step (most steps of a guarded reply), ``logits`` itself, uncopied;
        else a row this fence keeps and overwrites at its next call (a fresh 200 KB row a token
        cost more than the copy)."""
        if self.matcher is None:  # no refiner and no budget plan: the guards' mask is all there is
            mask = self._candidates()
            if mask is None and logits.shape[-1] <= self.vocab:
                return logits
            row = self._kept_copy(logits)
            write_mask(row, mask)
            return row
        row = self._kept_copy(logits)
        self.apply(row)
        return row

    def _kept_copy(self, logits: torch.Tensor) -> torch.Tensor:
        if self._row is None or self._row.shape != logits.shape or self._row.dtype != logits.dtype \
                or self._row.device != logits.device:
            self._row = torch.empty_like(logits)
        return self._row.copy_(logits)

    def advance(self, token: int) -> None:
        token = int(token)
        if self.matcher is not None:
            if token in self.stop_ids:
                if not self.matcher.is_accepting():
                    raise FenceError(f"end-of-turn token {token} was chosen while a structure is open")
            elif not self.matcher.consume(token):
                raise FenceError(f"token {token} was chosen outside the fence ({self.matcher.error() or 'not allowed'})")
        for guard in self.guards:
            guard.advance(token)
        if self.plan is not None:
            self.plan.advance(token, self.matcher)
        if self._intervened_at == self.position:
            self._interventions += 1
        self.recent = (self.recent + (token,))[-RECENT_TOKENS:]
        self.position += 1
        if self.budget is not None:
            self.budget -= 1

    def forced_tokens(self) -> list[int]:
        """Tokens that must come next (fast-forward); they need no logits."""
        if self.matcher is None:
            return []
        if self.plan is not None and self.plan.closing:
            return list(self.plan.closing)
        forced = self.matcher.forced_tokens()
        if self.budget is None:
            return forced
        if self.plan is not None:  # a run taken without logits must not skip a due budget check
            forced = self.plan.run_on_path(forced[: self.plan.unchecked_run(self.matcher, self.budget)])
        return forced[: max(0, self.budget)]

    def clone(self) -> "RequestFence":
        twin = copy.copy(self)
        twin.matcher = self.matcher.copy() if self.matcher is not None else None
        twin.guards = [guard.clone() for guard in self.guards]
        twin.plan = self.plan.clone() if self.plan is not None else None
        twin._bits = np.zeros_like(self._bits)
        twin._row = None
        return twin

    def take_state(self, other: "RequestFence") -> None:
        """Become ``other`` (a clone advanced by the accepted draft); ``other`` is consumed."""
        self.__dict__.update(other.__dict__)

    @property
    def must_stop(self) -> bool:
        """The output must end now: nothing may follow, a closed call leaves no room for another,
        or a guard ends the reply."""
        if self.guard_stop:
            return True
        if self.matcher is None:
            return False
        if self.matcher.is_stopped():
            return True
        return self.plan is not None and self.plan.must_stop(self.matcher, self.budget)

    @property
    def guard_stop(self) -> bool:
        """A guard ends the reply, and it may end here (no structure open)."""
        if not any(guard.ends_reply() for guard in self.guards):
            return False
        return self.matcher is None or self.matcher.is_accepting()

    @property
    def interventions(self) -> int:
        return self._interventions

    @property
    def call_cost(self) -> Optional[int]:
        return self.plan.call_cost if self.plan is not None else None

    # ---- the allowed set

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next (cheap: no full mask unless the budget is nearly spent)."""
        if not 0 <= token < self.vocab:
            return False
        if self.plan is not None and self.budget is not None and (
                self.budget <= FULL_CHECK_BUDGET or self.plan.due(self.matcher, self.budget)):
            mask = self._candidates()
            if mask is not None and not mask[token]:
                return False
            return self._fits(token)
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
        """The allowed set at this position (None: every token). In the budget's tight zone, without
        logits to rank them, only tokens already checked to fit and the closing path's first token."""
        mask = self._candidates()
        if self._forcing(mask) or self.plan is None or not self.plan.in_force():
            return mask
        fitting = [t for t in self.plan.verified if mask is None or mask[t]] + self.plan.path[:1]
        if not self.plan.path:
            fitting += [t for t in self.stop_ids if mask is None or mask[t]]
        out = np.zeros(self.vocab, dtype=np.bool_)
        out[fitting] = True
        return out

    def _fits(self, token: int) -> bool:
        plan = self.plan
        if token in self.stop_ids or not plan.in_force() or plan.closing:
            return True
        return plan.fits(self.matcher, token, self.budget)

    def _forcing(self, mask: Optional[np.ndarray]) -> bool:
        """The budget forces a closing token (the mask holds just it)."""
        return self.plan is not None and bool(self.plan.closing) and mask is not None

    def _candidates(self) -> Optional[np.ndarray]:
        """Grammar, budget (forced close, trigger bans) and guards; before the closing invariant."""
        mask = None
        if self.matcher is not None:
            self.matcher.fill_mask(self._bits)
            mask = unpack(self._bits, self.vocab)
            if not self._live(mask):
                raise FenceError(f"the grammar backend allows no token at position {self.position} "
                                 f"({self.matcher.error() or 'empty mask while a structure is open'})")
        if self.plan is not None:
            closing = self.plan.prepare(self.matcher, self.budget)
            if closing is not None:
                return only(closing, self.vocab)
            mask, _ = narrow(mask, self.plan.trigger_bans(self.budget), self.vocab)
        return self._guarded(mask)

    def _live(self, mask: np.ndarray) -> bool:
        """Some token is allowed (an end-of-turn token counts only where the output may end)."""
        allowed = int(np.count_nonzero(mask))
        if self.matcher.is_accepting():
            return allowed > 0
        return allowed > sum(1 for i in self.stop_ids if i < mask.shape[0] and mask[i])

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

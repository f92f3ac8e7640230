"""Speculative decoding with a registered drafter, fenced.

Per running sequence: a draft from a :class:`kvgate.core.drafter.Drafter` (the tokens the fence
forces first, then the drafter's continuation, cut where a clone of the fence refuses it:
:func:`kvgate.core.engine.draft.draft_for`), verified in one forward pass
(``runtime.prefill(session, [last] + draft, all_logits=True)``): at each position the fenced logits
are sampled exactly as an ordinary step would, and the draft token is accepted only when it is the
token sampled (for a deterministic draft this is exact speculative sampling; under greedy decoding
the output is the one without speculation). The rejected tail is truncated from the session; only
the accepted prefix advances the real fence (it takes the clone's state). A chosen token's
logprobs, when asked for, come from the verifying forward's row at its position. Sequences without
a draft go through the ordinary batched step.

A :class:`SpeculativeStep` is a :data:`kvgate.core.engine.steps.DecodeStep`: the engine chooses one
over ``steps.decode_step`` when ``[engine]`` asks for a drafter (see
``kvgate.core.engine.engine.decode_step_for``).
It counts the tokens its source drafted and how many of them were accepted (forced tokens are not
drafts), in :attr:`SpeculativeStep.stats` and the server metrics.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.core.engine import steps
from kvgate.core.drafter import Drafter
from kvgate.core.engine.draft import draft_for
from kvgate.core.engine.sampling import TokenLogprobs, logprobs_for, sample
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.engine.steps import StepHost
from kvgate.core.errors import Overloaded


def verify(seq: Sequence, rows, draft: list[int], forced: int) -> tuple[list[int], object]:
    """Sample each position of the fenced rows; returns (tokens chosen, fence state after them).

    ``rows[i]`` are the logits predicting ``draft[i]`` (``rows[len(draft)]`` the bonus token). The
    first ``forced`` positions are taken as they are. Stops at the first rejected draft token
    (its replacement is the last token returned) or after the bonus token.
    """
    work = seq.fence.clone() if seq.fence is not None else None
    chosen: list[int] = []
    budget = seq.budget_left()
    for index in range(len(draft) + 1):
        if index < forced:
            token = draft[index]
        else:
            logits = rows[index]
            if work is not None:
                work.set_budget(budget - index)
                logits = logits.clone()
                work.apply(logits)
            token = sample(logits, seq.params, seq.output + chosen, seq.generator)
        if work is not None:
            work.advance(token)
        chosen.append(token)
        if index == len(draft) or token != draft[index] or token in seq.stop_token_ids:
            break
        if work is not None and work.must_stop:
            break
    return chosen, work


def emit(engine: StepHost, seq: Sequence, tokens: list[int],
         logprobs: Optional[list[Optional[TokenLogprobs]]] = None) -> None:
    """Deliver chosen tokens in order (each with its logprobs, when given), finishing the sequence
    exactly as an ordinary step would."""
    for index, token in enumerate(tokens):
        if token in seq.stop_token_ids:
            engine.finish(seq, SequenceDone("stop"))
            return
        seq.output.append(token)
        seq.deliver(TokenOut(token, logprobs[index] if logprobs else None))
        last = index == len(tokens) - 1  # the fence already holds the state after the last token
        if last and seq.fence is not None and seq.fence.must_stop:
            engine.finish(seq, SequenceDone("stop"))
            return
        if seq.budget_left() <= 0 or seq.computed + 1 >= engine.runtime.info.max_context:
            engine.finish(seq, SequenceDone("length"))
            return


@attrs.define
class DraftStats:
    drafted: int = 0  # tokens the source proposed (past the forced ones)
    accepted: int = 0  # of those, the ones verification kept


def accepted_drafts(chosen: list[int], draft: list[int]) -> int:
    """How many leading draft tokens the verification chose."""
    count = 0
    while count < min(len(chosen), len(draft)) and chosen[count] == draft[count]:
        count += 1
    return count


def speculate(engine: StepHost, seq: Sequence, draft: list[int], forced: int) -> int:
    """Verify ``draft`` and emit what is chosen; returns how many drafted tokens were accepted."""
    session = seq.session
    base = session.length
    fed = [seq.output[-1]] + draft
    try:
        rows = steps.with_room(engine, len(fed), lambda: engine.runtime.prefill(session, fed, all_logits=True))
    except Overloaded as exc:
        engine.finish(seq, SequenceDone("error", exc))
        return 0
    chosen, work = verify(seq, rows, draft, forced)
    engine.runtime.truncate(session, base + len(chosen))  # last + accepted drafts; the newest is fed next
    if work is not None:
        seq.fence.take_state(work)
    # the verifying forward's row at each position: what a plain step would have computed there
    emit(engine, seq, chosen, [logprobs_for(seq.params, rows[i], token) for i, token in enumerate(chosen)])
    return accepted_drafts(chosen, draft)


@attrs.define
class SpeculativeStep:
    """Drop-in for ``steps.decode_step``: speculate where a draft exists, batch-decode the rest."""

    source: Drafter
    max_draft: int
    metrics: Any = None  # kvgate.core.observe.metrics.Metrics or None
    stats: DraftStats = attrs.field(factory=DraftStats)

    def __call__(self, engine: StepHost, batch: list[Sequence]) -> None:
        plain: list[Sequence] = []
        for seq in batch:
            if seq.cancelled or seq.stop_requested:
                plain.append(seq)
                continue
            room = min(seq.budget_left() - 1, engine.runtime.info.max_context - seq.computed - 2)
            draft, forced = draft_for(seq, self.max_draft, room, self.source)
            if draft:
                accepted = speculate(engine, seq, draft, forced)
                self.count(len(draft) - forced, max(accepted - forced, 0))
            else:
                plain.append(seq)
        if plain:
            steps.decode_step(engine, plain)

    def count(self, drafted: int, accepted: int) -> None:
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        if self.metrics is not None and drafted:
            self.metrics.drafts(drafted, accepted)

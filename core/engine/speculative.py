"""N-gram (prompt-lookup) speculative decoding, fenced.

Per running sequence: the tokens the fence forces come first in the draft (they need no logit
work: the grammar allows nothing else), then a continuation proposed by matching the last n-gram
of prompt + output against earlier text. The draft is checked on a clone of the fence, one token
at a time, and verified in one forward pass (``runtime.prefill(session, [last] + draft,
all_logits=True)``): at each position the fenced logits are sampled exactly as an ordinary step
would, and the draft token is accepted only when it is the token sampled (for a deterministic
draft this is exact speculative sampling; under greedy decoding the output is the one without
speculation). The rejected tail is truncated from the session; only the accepted prefix advances
the real fence (it takes the clone's state). A chosen token's logprobs, when asked for, come from
the verifying forward's row at its position. Sequences without a draft go through the ordinary
batched step.

:func:`speculative_decode_step` is a :data:`kvgate.core.engine.steps.DecodeStep`: the engine
chooses it over ``steps.decode_step`` when ``[engine] speculative_ngram`` (the draft length) is
positive (see ``kvgate.core.engine.engine.decode_step_for``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from kvgate.core.engine import steps
from kvgate.core.engine.sampling import TokenLogprobs, logprobs_for, sample
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.engine.steps import StepHost
from kvgate.core.errors import Overloaded

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


def draft_for(seq: Sequence, max_draft: int, room: int) -> tuple[list[int], int]:
    """(draft, how many of its first tokens the fence forces), checked against a fence clone."""
    limit = min(max_draft, room)
    if limit <= 0:
        return [], 0
    fence = seq.fence
    forced = list(fence.forced_tokens()[:limit]) if fence is not None else []
    history = seq.prompt + seq.output + forced
    draft = forced + propose_ngram(history, limit - len(forced))
    if fence is None or len(draft) == len(forced):
        return draft, len(forced)
    check = fence.clone()
    for token in forced:
        check.advance(token)
    for index in range(len(forced), len(draft)):
        check.set_budget(seq.budget_left() - index)
        if draft[index] in seq.stop_token_ids or not check.allows(draft[index]):
            return draft[:index], len(forced)
        check.advance(draft[index])
    return draft, len(forced)


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


def speculate(engine: StepHost, seq: Sequence, draft: list[int], forced: int) -> None:
    session = seq.session
    base = session.length
    fed = [seq.output[-1]] + draft
    try:
        rows = steps.with_room(engine, len(fed), lambda: engine.runtime.prefill(session, fed, all_logits=True))
    except Overloaded as exc:
        engine.finish(seq, SequenceDone("error", exc))
        return
    chosen, work = verify(seq, rows, draft, forced)
    engine.runtime.truncate(session, base + len(chosen))  # last + accepted drafts; the newest is fed next
    if work is not None:
        seq.fence.take_state(work)
    # the verifying forward's row at each position: what a plain step would have computed there
    emit(engine, seq, chosen, [logprobs_for(seq.params, rows[i], token) for i, token in enumerate(chosen)])


def speculative_decode_step(engine: StepHost, batch: list[Sequence], max_draft: Optional[int] = None) -> None:
    """Drop-in for ``steps.decode_step``: speculate where a draft exists, batch-decode the rest."""
    max_draft = engine.config.speculative_ngram if max_draft is None else max_draft
    plain: list[Sequence] = []
    for seq in batch:
        if seq.cancelled or seq.stop_requested:
            plain.append(seq)
            continue
        room = min(seq.budget_left() - 1, engine.runtime.info.max_context - seq.computed - 2)
        draft, forced = draft_for(seq, max_draft, room)
        if draft:
            speculate(engine, seq, draft, forced)
        else:
            plain.append(seq)
    if plain:
        steps.decode_step(engine, plain)

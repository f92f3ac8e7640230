"""One prefill chunk and one batched decode step, with block reclamation around them.

The functions take a :class:`StepHost`, the part of the engine they may use; a decode strategy
(:data:`DecodeStep`, e.g. :func:`decode_step` or the speculative one) has the same shape.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Protocol, TypeVar

import torch

from kvgate.core.config import EngineConfig
from kvgate.core.engine.sampling import logprobs_for, sample
from kvgate.core.engine.sequence import PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.errors import Overloaded
from kvgate.core.runtime import ModelRuntime, OutOfBlocks, PrefillInterrupted

T = TypeVar("T")
log = logging.getLogger("kvgate.engine")


class StepHost(Protocol):
    """What a step needs from the engine (:class:`kvgate.core.engine.engine.Engine` is one)."""

    runtime: ModelRuntime
    config: EngineConfig
    cache: Any  # reclaim(blocks) -> blocks freed

    def batch_size(self) -> int:
        """Sequences in the running (decoding) batch."""

    def start_decoding(self, seq: Sequence) -> None:
        """Move a sequence whose prompt is in state into the running batch."""

    def finish(self, seq: Sequence, done: SequenceDone) -> None:
        """Release or cache its state and tell its consumer; never raises."""


DecodeStep = Callable[[StepHost, list[Sequence]], None]  # one step over the running batch


def with_room(engine: StepHost, tokens_needed: int, work: Callable[[], T]) -> T:
    """Run ``work``; when the pool is out of blocks, reclaim cached state and try once more."""
    try:
        return work()
    except OutOfBlocks:
        pass
    blocks = math.ceil(tokens_needed / engine.runtime.block_size) + engine.batch_size() + 1
    engine.cache.reclaim(blocks)
    if engine.runtime.pool_stats()["blocks_free"] < blocks:
        raise Overloaded("No room for this request's state right now; retry shortly.", retry_after=2)
    return work()


def prefill_chunk(engine: StepHost, seq: Sequence, tokens: int) -> None:
    """Compute the next ``tokens`` of the prompt (its size is the engine's schedule,
    :mod:`kvgate.core.engine.prefill_schedule`); on the last chunk, sample the first token."""
    pending = seq.remaining_prompt()
    chunk = pending[:tokens]
    try:
        logits = with_room(engine, len(chunk), lambda: engine.runtime.prefill(
            seq.session, chunk, interrupted=lambda: seq.cancelled))
    except PrefillInterrupted:
        engine.finish(seq, SequenceDone("cancelled"))
        return
    except Overloaded as exc:
        if engine.batch_size():
            return  # running sequences will finish and free blocks; try again next turn
        engine.finish(seq, SequenceDone("error", exc))
        return
    if len(chunk) < len(pending):
        return
    plan = seq.plan
    engine.cache.pin(plan, seq.session)  # the prompt is computed: its marked prefixes can be kept
    seq.deliver(PrefillDone(len(seq.prompt), plan.cached_device, plan.cached_ssd, plan.retained_marks,
                            plan.replayed_tokens))
    if not seq.generate or seq.max_tokens <= 0:
        engine.finish(seq, SequenceDone("stop" if not seq.generate else "length"))
        return
    engine.start_decoding(seq)
    choose_and_emit(engine, seq, logits)


def decode_step(engine: StepHost, batch: list[Sequence]) -> None:
    """Feed each running sequence its last token in one batched forward, then sample."""
    sessions = [seq.session for seq in batch]
    last = [seq.output[-1] for seq in batch]
    try:
        logits = with_room(engine, len(batch), lambda: engine.runtime.decode(sessions, last))
    except Overloaded as exc:
        engine.finish(batch[-1], SequenceDone("error", exc))  # preempt the newest; the rest continue
        return
    for row, seq in enumerate(batch):
        choose_and_emit(engine, seq, logits[row])


def choose_and_emit(engine: StepHost, seq: Sequence, logits: torch.Tensor) -> None:
    """Fence, sample, deliver (with the token's logprobs from ``logits``, when asked for); finish
    the sequence on a stop token, the budget or a stop request."""
    if seq.cancelled or seq.stop_requested:
        engine.finish(seq, SequenceDone("cancelled" if seq.cancelled else "stop"))
        return
    try:
        token = fenced_sample(seq, logits)
    except Exception as exc:  # a fence failure ends this sequence only, never the batch
        log.exception("sequence %d: choosing a token failed", seq.id)
        engine.finish(seq, SequenceDone("error", exc))
        return
    if token in seq.stop_token_ids:
        engine.finish(seq, SequenceDone("stop"))
        return
    seq.output.append(token)
    seq.deliver(TokenOut(token, logprobs_for(seq.params, logits, token)))  # the unfenced row
    if seq.fence is not None and seq.fence.must_stop:
        engine.finish(seq, SequenceDone("stop"))
    elif seq.budget_left() <= 0 or seq.computed + 1 >= engine.runtime.info.max_context:
        engine.finish(seq, SequenceDone("length"))


def fenced_sample(seq: Sequence, logits: torch.Tensor) -> int:
    fence = seq.fence
    if fence is None:
        return sample(logits, seq.params, seq.output, seq.generator)
    fence.set_budget(seq.budget_left())
    token = sample(fence.masked(logits), seq.params, seq.output, seq.generator)
    fence.advance(token)
    return token

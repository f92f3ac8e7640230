"""``SequenceRun`` over the real engine and SmolLM2 runtime: the messages come in order up to the
``SequenceDone``, a consumer that leaves first cancels the sequence, a refused one leaves nothing
to cancel, and a quiet wait gives a heartbeat."""

from __future__ import annotations

import asyncio

import pytest

from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.engine.sequence_run import SequenceRun
from kvgate.core.errors import Overloaded
from kvgate.core.types import SamplingParams


def sequence(run: SequenceRun, max_tokens: int) -> Sequence:
    return Sequence(prompt=[1, 2, 3, 4], params=SamplingParams(temperature=0.0), max_tokens=max_tokens,
                    stop_token_ids=frozenset(), deliver=run.deliver)


async def whole_run(engine: Engine) -> list:
    with SequenceRun(engine) as run:
        run.submit(sequence(run, 3))
        return [message async for message in run]


def test_a_run_gives_the_messages_up_to_the_sequence_done(engine):
    messages = asyncio.run(whole_run(engine))
    assert isinstance(messages[0], PrefillDone)
    assert [type(m) for m in messages[1:]] == [TokenOut, TokenOut, TokenOut, SequenceDone]
    assert messages[-1].reason == "length" and engine.load() == 0


async def left_after_the_first_message(engine: Engine) -> tuple[bool, SequenceDone]:
    with SequenceRun(engine) as run:
        run.submit(sequence(run, 10_000))
        async for _ in run:
            break
        left_early = run.left_early
    while not isinstance(message := await run.queue.get(), SequenceDone):
        pass
    return left_early, message


def test_a_consumer_that_leaves_first_cancels_the_sequence(engine):
    left_early, done = asyncio.run(left_after_the_first_message(engine))
    assert left_early and done.reason == "cancelled" and engine.load() == 0


async def refused(engine: Engine) -> SequenceRun:
    with SequenceRun(engine) as run:
        with pytest.raises(Overloaded):
            run.submit(sequence(run, 3))
    return run


def test_a_refused_sequence_leaves_nothing_to_cancel(engine):
    engine.drain()
    run = asyncio.run(refused(engine))
    assert run.seq is None and not run.left_early


async def first_message_before_any(engine: Engine):
    with SequenceRun(engine, heartbeat_s=0.01) as run:
        return await anext(run)


def test_a_quiet_wait_gives_a_heartbeat(engine):
    assert asyncio.run(first_message_before_any(engine)) is None

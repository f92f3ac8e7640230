"""``Sequence.announce_plan`` over the real engine and SmolLM2 runtime: a ``Planned`` message comes
first, with the figures the ``PrefillDone`` repeats; a sequence that does not ask gets none."""

from __future__ import annotations

import asyncio

from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Planned, PrefillDone, Sequence, SequenceDone, TokenOut
from kvgate.core.engine.sequence_run import SequenceRun
from kvgate.core.types import SamplingParams


async def messages(engine: Engine, announce: bool) -> list:
    with SequenceRun(engine) as run:
        run.submit(Sequence(prompt=[1, 2, 3, 4, 5], params=SamplingParams(temperature=0.0), max_tokens=2,
                            stop_token_ids=frozenset(), deliver=run.deliver, announce_plan=announce))
        return [message async for message in run]


def test_the_plan_is_announced_before_the_prefill_ends(engine):
    planned, prefilled, *rest = asyncio.run(messages(engine, announce=True))
    assert isinstance(planned, Planned) and isinstance(prefilled, PrefillDone)
    assert (planned.prompt_tokens, planned.cached_device, planned.cached_ssd) == (
        prefilled.prompt_tokens, prefilled.cached_device, prefilled.cached_ssd) == (5, 0, 0)
    assert [type(m) for m in rest] == [TokenOut, TokenOut, SequenceDone]


def test_no_announcement_unless_asked(engine):
    assert not any(isinstance(m, Planned) for m in asyncio.run(messages(engine, announce=False)))

"""``ticking``, the summary pass's clock: events pass through as they come, a TICK marks each
interval in which none came, and leaving early stops the source where it waits (the server test
of the summary pass is test_responses_compaction_progress_server)."""

from __future__ import annotations

import asyncio
import contextlib

from kvgate.adapters.responses.summary_pass import TICK, ticking


async def slow_events(delays: list[float], closed: list[str]):
    try:
        for index, delay in enumerate(delays):
            await asyncio.sleep(delay)
            yield index
    finally:
        closed.append("closed")


async def collect(delays: list[float], seconds: float, closed: list[str], limit: int = 100) -> list:
    seen = []
    async with contextlib.aclosing(ticking(slow_events(delays, closed), seconds)) as events:
        async for event in events:
            seen.append(event)
            if len(seen) == limit:
                break
    return seen


def test_events_pass_through_and_ticks_fill_the_silences():
    closed: list[str] = []
    seen = asyncio.run(collect([0.0, 0.35, 0.0], 0.1, closed))
    assert [event for event in seen if event is not TICK] == [0, 1, 2]
    ticks_before_one = seen[seen.index(0) + 1:seen.index(1)]
    assert 2 <= len(ticks_before_one) <= 4 and all(event is TICK for event in ticks_before_one)
    assert seen[-1] == 2 and closed == ["closed"]


def test_no_tick_while_events_come_faster_than_the_interval():
    assert asyncio.run(collect([0.01] * 5, 0.5, [])) == [0, 1, 2, 3, 4]


def test_leaving_mid_wait_cancels_the_source():
    closed: list[str] = []

    async def leave_after_the_first_tick():
        seen = await collect([5.0], 0.05, closed, limit=1)
        await asyncio.sleep(0)  # the cancelled source runs its finally
        return seen

    assert asyncio.run(asyncio.wait_for(leave_after_the_first_tick(), 2.0)) == [TICK]
    assert closed == ["closed"]

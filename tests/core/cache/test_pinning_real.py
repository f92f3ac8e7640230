"""Retention pins in the cache manager on the real runtime (core/cache/pinning.py): a pinned prefix
survives a flood that evicts everything else, its TTL (on the pin table's injected clock) lets it
go, budgets refuse what does not fit, and the SSD tier is told to keep it."""

from __future__ import annotations

import pytest
import torch

from kvgate.core.cache.retention import Retention, RetentionMark
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, long_text, text_tokens

pytestmark = pytest.mark.slow
PREFIX = 32  # two blocks of 16


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run_marked(manager, rt, tokens, marks=(), tenant="default"):
    """A request as the engine runs it: plan (with its marks) -> attach -> prefill -> pin -> finish."""
    retention = Retention(tenant, tuple(RetentionMark(p, "1h", 3600.0) for p in marks)) if marks else None
    plan = manager.plan(NS, tokens, None, retention)
    session = manager.attach(plan)
    logits = rt.prefill(session, tokens[session.length:])
    manager.pin(plan, session)
    rt.decode([session], [int(torch.argmax(logits))])
    manager.settle(plan)
    manager.finish(NS, session, None)
    return plan


def flood(manager, rt, count=5):
    """Other sessions' prompts, together over the device budget (12 blocks)."""
    for i in range(count):
        run_marked(manager, rt, text_tokens(rt, long_text(50 + i, 40))[:48])


def resident_length(manager, tokens) -> int:
    return manager.device.longest(NS, tokens)[1]


@pytest.fixture
def manager(tmp_path, cache_runtime):
    rt = cache_runtime
    budget = 12 * rt.pool_stats()["block_bytes"]
    manager = make_manager(cache_config(tmp_path, device_bytes=budget, decode_reserve_tokens=0), rt)
    yield manager
    manager.close()


def test_a_pinned_prefix_survives_a_flood_that_evicts_everything_unpinned(manager, cache_runtime):
    rt = cache_runtime
    marked = text_tokens(rt, long_text(1, 80))[:48]
    control = text_tokens(rt, long_text(2, 80))[:48]
    plan = run_marked(manager, rt, marked, marks=[PREFIX])
    assert plan.retained_marks == ((PREFIX, "1h"),)
    run_marked(manager, rt, control)
    pinned_bytes = 2 * rt.pool_stats()["block_bytes"]
    assert manager.device.pinned_bytes() == pinned_bytes == manager.metrics.pinned_bytes._value.get()
    flood(manager, rt)
    assert resident_length(manager, control) < PREFIX  # the unpinned control is gone
    assert resident_length(manager, marked) == PREFIX  # the marked prefix is not; the rest of it is
    again = manager.plan(NS, marked[:PREFIX] + control[:8], None)
    assert again.source == "device" and again.cached_tokens == PREFIX
    assert manager.diagnostics()["pins"]["pins"] == 1
    assert manager.ssd.retained.count() == 1  # the SSD tier keeps it as long


def test_the_ttl_lets_a_pin_go_and_the_flood_then_takes_it(manager, cache_runtime):
    rt = cache_runtime
    clock = manager.pins.clock = Clock(1_000_000.0)
    marked = text_tokens(rt, long_text(3, 80))[:48]
    run_marked(manager, rt, marked, marks=[PREFIX])
    clock.now += 3599
    flood(manager, rt, 2)
    assert resident_length(manager, marked) >= PREFIX
    clock.now += 2
    flood(manager, rt)
    assert resident_length(manager, marked) < PREFIX and manager.device.pinned_bytes() == 0


def test_marks_over_the_pinned_share_or_a_tenants_part_are_ignored(tmp_path, cache_runtime):
    rt = cache_runtime
    block = rt.pool_stats()["block_bytes"]
    config = cache_config(tmp_path, device_bytes=24 * block, decode_reserve_tokens=0, pinned_share=0.5,
                          pinned_tenant_share=0.25)  # 12 blocks pinned, 3 per tenant
    manager = make_manager(config, rt, ssd=False)
    try:
        first = run_marked(manager, rt, text_tokens(rt, long_text(4, 80))[:48], marks=[PREFIX], tenant="a")
        over = run_marked(manager, rt, text_tokens(rt, long_text(5, 80))[:48], marks=[PREFIX], tenant="a")
        other = run_marked(manager, rt, text_tokens(rt, long_text(6, 80))[:48], marks=[PREFIX], tenant="b")
        assert first.retained_marks and not over.retained_marks and other.retained_marks
        assert manager.metrics.pins_refused.labels(reason="tenant_share")._value.get() == 1
        assert manager.diagnostics()["pins"]["by_tenant"] == {"a": 2 * block, "b": 2 * block}
    finally:
        manager.close()


def test_an_agents_next_marked_turn_replaces_its_pin(tmp_path, cache_runtime):
    rt = cache_runtime
    block = rt.pool_stats()["block_bytes"]
    manager = make_manager(cache_config(tmp_path, device_bytes=24 * block, decode_reserve_tokens=0,
                                        pinned_tenant_share=0.5), rt, ssd=False)  # 6 blocks for the tenant
    try:
        turn = text_tokens(rt, long_text(7, 80))[:64]
        first = run_marked(manager, rt, turn[:48], marks=[PREFIX])
        second = run_marked(manager, rt, turn, marks=[PREFIX, 64])  # 4 blocks: 2 more than the first pin
        assert first.retained_marks == ((PREFIX, "1h"),) and second.retained_marks == ((64, "1h"),)
        summary = manager.diagnostics()["pins"]
        assert summary["pins"] == 1 and summary["by_tenant"] == {"default": 4 * block}
        assert manager.device.pinned_bytes() == 4 * block
    finally:
        manager.close()

"""Memory pressure on the real runtime: restores cancelled 1,000 times, admission never deadlocks,
the byte budget, the decode reserve and the prefix-round limit hold."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.core.cache.conftest import cache_config, make_manager, small_pool_runtime
from tests.core.cache.real_helpers import NS, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_thousand_cancelled_restores_keep_pool_and_memory_flat(tmp_path, cache_runtime):
    rt = cache_runtime
    manager = make_manager(cache_config(tmp_path), rt)
    tokens = text_tokens(rt, long_text(8, 30))[:24]
    _, _, stored = run_request(manager, rt, tokens, output_tokens=1)
    manager.reclaim(10**9)
    manager.ssd.flush()
    probe = stored + text_tokens(rt, " next")
    free_before = rt.pool_stats()["blocks_free"]

    def cancel_one(worker, i):
        plan = manager.plan(NS, probe, None)
        assert plan.source == "ssd" and plan.needs_load
        worker.submit(manager.load, plan).result()
        if i % 4 == 0:
            return  # cancelled after the read, before attach: nothing to give back
        session = manager.attach(plan)
        assert session.length == plan.cached_tokens > 0
        manager.discard(session)  # cancelled after the restore

    with ThreadPoolExecutor(max_workers=1) as worker:
        for i in range(100):
            cancel_one(worker, i)
        rss_warm = rss_bytes()
        for i in range(900):
            cancel_one(worker, i)
        rss_after = rss_bytes()
    pool = manager.pool.stats()
    assert pool["created"] == 1 and pool["free"] == 1 and pool["lent"] == 0 and pool["overflow"] == 0
    assert rt.pool_stats()["blocks_free"] == free_before
    assert rss_after - rss_warm < 64 * 1024 * 1024, (rss_warm, rss_after)
    manager.close()


def fill_cache(manager, rt, conversations: int) -> list[list[int]]:
    stored = []
    for i in range(conversations):
        tokens = text_tokens(rt, long_text(20 + i, 45))[:64]
        stored.append(run_request(manager, rt, tokens, cache_key=f"c{i}", output_tokens=1)[2])
    return stored


def test_admission_never_deadlocks_while_reclaimable_state_exists(tmp_path, cache_runtime):
    rt = small_pool_runtime(cache_runtime, pool_tokens=28 * 16)
    manager = make_manager(cache_config(tmp_path, decode_reserve_tokens=16), rt)
    stored = fill_cache(manager, rt, 5)  # 5 x 5 blocks: the cache holds nearly the whole pool
    assert rt.pool_stats()["blocks_free"] <= 3 and len(manager.device.entries()) == 5
    # a request that forks a resident entry and needs more blocks than are free
    prompt = stored[-1] + text_tokens(rt, long_text(99, 100))[:150]
    plan = manager.plan(NS, prompt, "c4")
    assert plan.source == "device"
    session = manager.attach(plan)
    rest = prompt[session.length:]
    needed = -(-len(prompt) // rt.block_size) - len(session.block_table) + 1
    with pytest.raises(Exception, match="exhausted"):
        rt.prefill(session, rest)  # without reclaiming, the pool is full: the deadlock case
    assert session.length == plan.cached_tokens
    freed = manager.reclaim(needed)
    assert freed > 0 and rt.pool_stats()["blocks_free"] >= needed
    rt.prefill(session, rest)  # admitted
    manager.finish(NS, session, "c4")
    manager.ssd.flush()
    # what was evicted was backed up first: an old conversation restores from SSD
    plan = manager.plan(NS, stored[0] + [17, 18], "c0")
    assert plan.source == "ssd" and plan.cached_tokens == len(stored[0])
    manager.close()


def test_budget_and_decode_reserve_bound_the_resident_bytes(tmp_path, cache_runtime):
    rt = small_pool_runtime(cache_runtime, pool_tokens=64 * 16)
    block_bytes = rt.pool_stats()["block_bytes"]
    manager = make_manager(cache_config(tmp_path, device_bytes=12 * block_bytes, decode_reserve_tokens=16 * 16), rt)
    fill_cache(manager, rt, 4)  # 4 entries of 5 blocks each
    assert manager.device.resident_bytes() <= 12 * block_bytes
    assert rt.pool_stats()["blocks_free"] >= 16
    assert len(manager.device.entries()) == 2
    manager.ssd.flush()
    assert len(manager.ssd.store.records) == 4  # evicted entries were backed up
    manager.close()


def test_prefix_round_limit_drops_intermediate_turns_but_keeps_the_shared_anchor(tmp_path, cache_runtime):
    rt = cache_runtime
    manager = make_manager(cache_config(tmp_path, prefix_rounds=2), rt)
    system = text_tokens(rt, long_text(30, 20))
    _, _, anchor = run_request(manager, rt, system, output_tokens=1)
    run_request(manager, rt, anchor + text_tokens(rt, " other session"), cache_key="b", output_tokens=1)
    history = anchor
    for turn in range(4):
        _, _, history = run_request(manager, rt, history + text_tokens(rt, f" turn {turn}"), cache_key="a",
                                    output_tokens=1)
    rounds = sorted(e.round for e in manager.device.entries())
    lengths = {len(e.tokens) for e in manager.device.entries()}
    assert len(anchor) in lengths  # the fork point shared by both sessions stays
    assert len(history) in lengths
    assert rounds == [1, 2, 4, 5]  # anchor, session b, and the newest two turns of session a
    manager.close()

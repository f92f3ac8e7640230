"""The SSD tier keeps a retained prefix's snapshot (plugins/cache_ssd/retention.py) past LRU
eviction until its deadline, on real disk with synthetic payloads and an injected clock."""

from __future__ import annotations

from kvgate.plugins.cache_ssd.tier import SsdTier

from tests.plugins.cache_ssd.ssd_helpers import FORMAT, pending

C = 8


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def commit(tier: SsdTier, tokens: list[int]) -> None:
    assert tier.submit(pending("ns", tokens, C), wait=True)
    assert tier.flush()


def stored(tier: SsdTier) -> list[list[int]]:
    return [record.tokens for record in tier.store.records.values()]


def test_a_retained_snapshot_outlives_lru_eviction_until_its_deadline(tmp_path):
    tier = SsdTier(tmp_path, C, capacity_bytes=10**9, state_format=FORMAT, prefix_rounds=4)
    clock = tier.retained.clock = Clock(1000.0)
    prefix = list(range(16))
    tier.retain("ns", prefix, 300.0)  # asked before the snapshot is committed
    commit(tier, prefix)
    tier.store.capacity_bytes = 2 * tier.store.total_bytes  # room for two snapshots
    others = [list(range(100 * i, 100 * i + 16)) for i in range(1, 5)]
    for tokens in others:
        commit(tier, tokens)
    assert prefix in stored(tier) and others[0] not in stored(tier) and tier.stats()["retained"] == 1
    clock.now += 301
    commit(tier, list(range(900, 916)))
    assert prefix not in stored(tier) and tier.stats()["retained"] == 0
    tier.close()


def test_a_later_deadline_wins(tmp_path):
    tier = SsdTier(tmp_path, C, capacity_bytes=10**9, state_format=FORMAT, prefix_rounds=4)
    clock = tier.retained.clock = Clock(0.0)
    tier.retain("ns", [1, 2], 3600.0)
    tier.retain("ns", [1, 2], 60.0)
    commit(tier, [1, 2])
    (record,) = tier.store.records.values()
    clock.now = 3599.0
    assert tier.retained.holds(record)
    clock.now = 3600.0
    assert not tier.retained.holds(record)
    tier.close()

"""The pin table (core/cache/pins.py) on an injected clock: budgets, tenant parts, refresh by use,
expiry."""

from __future__ import annotations

import attrs

from kvgate.core.cache.pins import PinTable


@attrs.define(eq=False)
class Entry:
    tokens: list[int]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pinned(table: PinTable, tokens: list[int], tenant: str = "a", ttl: float = 3600.0, nbytes: int = 10):
    assert table.reserve(tenant, nbytes) is None
    return table.add(Entry(tokens), "ns", tenant, "1h", ttl, nbytes)


def test_a_pin_expires_at_its_ttl_and_each_use_pushes_it_out():
    clock = Clock()
    table = PinTable(100, None, clock)
    pin = pinned(table, [1, 2, 3], ttl=300.0)
    clock.now += 299
    assert table.used("ns", [1, 2, 3, 4]) == [pin]  # a hit on a longer prompt refreshes it
    assert table.used("other", [1, 2, 3, 4]) == [] and table.used("ns", [1, 2]) == []
    clock.now += 299
    assert table.expired() == []
    clock.now += 2
    assert table.expired() == [pin] and table.find("ns", [1, 2, 3]) is None and table.held() == 0


def test_a_longer_mark_extends_a_pin_and_a_shorter_one_never_shortens_it():
    clock = Clock()
    table = PinTable(100, None, clock)
    pin = pinned(table, [1, 2], ttl=300.0)
    table.extend(pin, "1h", 3600.0)
    assert (pin.ttl, pin.expires) == ("1h", clock.now + 3600)
    table.extend(pin, "5m", 300.0)
    assert (pin.ttl, pin.expires) == ("1h", clock.now + 3600)


def test_the_budget_counts_pins_and_reservations_and_refusals_are_counted():
    table = PinTable(100, None, Clock())
    pinned(table, [1], nbytes=60)
    assert table.reserve("a", 30) is None
    assert table.reserve("b", 20) == "share"  # 60 pinned + 30 reserved + 20 > 100
    table.release("a", 30)
    assert table.reserve("b", 20) is None
    assert table.held() == 80 and table.refused["share"] == 1


def test_a_tenant_pins_only_within_its_part():
    table = PinTable(100, 40, Clock())
    pinned(table, [1], tenant="a", nbytes=30)
    assert table.reserve("a", 20) == "tenant_share"
    assert table.reserve("b", 40) is None  # b's part is its own
    summary = table.summary()
    assert summary["by_tenant"] == {"a": 30, "b": 40} and summary["refused"] == {"tenant_share": 1}
    assert summary["entries"][0]["tokens"] == 1 and summary["entries"][0]["expires_in_s"] == 3600.0


def test_dropping_an_entry_forgets_its_pin():
    table = PinTable(100, None, Clock())
    pin = pinned(table, [5, 6])
    table.drop(pin.entry)
    assert table.find("ns", [5, 6]) is None and table.held() == 0


def test_a_longer_pin_of_the_same_tenant_covers_its_shorter_ones():
    clock = Clock()
    table = PinTable(100, None, clock)
    short = pinned(table, [1, 2], ttl=300.0)
    pinned(table, [7, 8], ttl=300.0)  # another prefix
    assert table.covered("ns", [1, 2, 3], "a", 300.0) == [short]
    assert table.covered("ns", [1, 2, 3], "b", 300.0) == []  # another tenant's pin is its own
    assert table.covered("ns", [1, 2, 3], "a", 60.0) == []  # it would outlive the new one
    assert table.covered("ns", [1, 2], "a", 300.0) == []  # the same prefix is not a shorter one

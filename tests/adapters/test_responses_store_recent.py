"""The recent conversations the responses store keeps in memory: bounded in bytes and entries, per
tenant, and a chain rebuilt through them equals the one rebuilt from disk alone."""

from __future__ import annotations

from kvgate.adapters.responses.store import ResponseStore
from kvgate.adapters.responses.store_recent import RecentConversations, weight
from kvgate.core.types import Message
from tests.adapters.test_responses_store_chain import chain


def test_memory_stays_within_its_bytes_and_entries():
    recent = RecentConversations(max_bytes=10_000, max_entries=5)
    big = [Message(role="user", content="x" * 3000)]
    for index in range(20):
        recent.remember("default", f"resp_{index}", big)
        assert recent.bytes <= 10_000 and len(recent.entries) <= 5
    assert recent.bytes == 3 * weight(big) and recent.get("default", "resp_19") is big
    assert recent.get("default", "resp_0") is None and recent.get("bob", "resp_19") is None
    recent.remember("default", "huge", [Message(role="user", content="x" * 20_000)])
    assert recent.get("default", "huge") is None  # larger than the whole bound: not kept
    recent.forget("default", "resp_19")
    assert recent.get("default", "resp_19") is None and recent.bytes == 2 * weight(big)


def test_a_chain_read_cold_equals_one_read_warm(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    records = chain(store, 30)
    warm = store.get("resp_29")
    store.close()
    cold = ResponseStore(tmp_path / "responses")
    assert not cold.recent.entries and cold.get("resp_29") == warm == records[-1]
    assert cold.recent.get("default", "resp_29") == records[-1].messages
    assert cold.delete("resp_29") and cold.recent.get("default", "resp_29") is None

"""The stored-response records on a real disk: round trip, reopen, untrusted contents, delete."""

from __future__ import annotations

import diskcache

from kvgate.adapters.responses.store import ResponseStore, StoredResponse
from kvgate.core.types import Message, Tool, ToolCall


def record(response_id: str = "resp_1") -> StoredResponse:
    messages = [Message(role="user", content="hi"),
                Message(role="assistant", content="yo", reasoning="r",
                        tool_calls=[ToolCall("call_1", "f", '{"a":1}', namespace="ns")])]
    return StoredResponse(response={"id": response_id, "object": "response", "output": []},
                          input_items=[{"id": "msg_1", "type": "message", "role": "user", "content": "hi"}],
                          messages=messages, cache_key="thread")


def test_round_trip_survives_reopening(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    store.put(record())
    store.close()
    again = ResponseStore(tmp_path / "responses").get("resp_1")
    assert again == record()
    assert again.messages[1].tool_calls[0].namespace == "ns"


def test_unknown_and_deleted_ids_are_absent(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    assert store.get("resp_missing") is None
    store.put(record("resp_2"))
    assert store.delete("resp_2") is True
    assert store.get("resp_2") is None and store.delete("resp_2") is False


def test_corrupt_records_read_as_absent_and_are_dropped(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    raw = diskcache.Cache(str(tmp_path / "responses"))
    bad = {"resp_json": "{not json", "resp_version": '{"version": 99}', "resp_bytes": b"\x00\xff",
           "resp_shape": '{"version": 1, "response": {"id": "x"}, "input_items": [], "messages": [{"role": 5}]}',
           "resp_key": '{"version": 1, "response": {}, "input_items": [], "messages": [], "cache_key": 7}'}
    for key, value in bad.items():
        raw.set(key, value)
    for key in bad:
        assert store.get(key) is None, key
        assert key not in raw


def test_tools_round_trip(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    kept = record("resp_tools")
    kept.tools = [Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})]
    kept.request_tools = [Tool("run", namespace="shell", strict=True)]
    store.put(kept)
    store.close()
    assert ResponseStore(tmp_path / "responses").get("resp_tools") == kept


def test_one_tenants_records_never_evict_anothers(tmp_path):
    store = ResponseStore(tmp_path / "responses", size_limit=256 * 1024)
    kept = record("resp_a")
    kept.tenant = "alice"
    store.put(kept)
    for index in range(40):  # ~1.6 MB from another tenant, six times the limit
        flood = record(f"resp_b{index}")
        flood.tenant, flood.response["metadata"] = "bob", {"pad": "x" * 40_000}
        store.put(flood)
    assert store.get("resp_a", "alice") == kept
    assert store.get("resp_a", "bob") is None and store.get("resp_b39", "alice") is None
    assert store.get("resp_b39", "bob") is not None and store.get("resp_b0", "bob") is None  # bob's own LRU
    assert store.delete("resp_a", "bob") is False and store.get("resp_a", "alice") == kept

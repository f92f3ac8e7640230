"""Stored responses share their history (issue 31, finding 3): a record continuing a stored response
keeps only what it adds, the conversation is rebuilt along the chain, deleting a parent keeps its
children whole, and damage or eviction anywhere in a chain reads as absent, never as a wrong
conversation."""

from __future__ import annotations

import json

import diskcache

from kvgate.adapters.responses.store import ResponseStore, StoredResponse
from kvgate.core.types import Message


def turn(index: int) -> list[Message]:
    return [Message(role="user", content=f"w{index}"), Message(role="assistant", content=f"a{index}")]


def chain(store: ResponseStore, turns: int, tenant: str = "default", prefix: str = "resp_") -> list[StoredResponse]:
    """``turns`` records, each continuing the one before (as ``Run.keep`` builds them)."""
    records, messages = [], []
    for index in range(turns):
        parent = records[-1].response["id"] if records else None
        record = StoredResponse(response={"id": f"{prefix}{index}", "object": "response", "output": []},
                                input_items=[{"id": f"msg_{index}", "type": "message"}],
                                messages=messages + turn(index), tenant=tenant, parent=parent, shared=len(messages))
        store.put(record)
        records.append(record)
        messages = record.messages
    return records


def raw_row(tmp_path, response_id: str):
    text = diskcache.Cache(str(tmp_path / "responses")).get(response_id)
    return None if text is None else json.loads(text)


def test_each_record_stores_only_what_it_adds(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    records = chain(store, 60)
    sizes = [len(json.dumps(raw_row(tmp_path, record.response["id"]))) for record in records]
    assert max(sizes[1:]) - min(sizes[1:]) < 40 and [message["content"] for message in raw_row(
        tmp_path, "resp_59")["added"]] == ["w59", "a59"]
    store.close()
    again = ResponseStore(tmp_path / "responses").get("resp_59")
    assert again == records[-1] and [m.content for m in again.messages][::2] == [f"w{i}" for i in range(60)]


def test_a_changed_last_message_is_stored_as_the_child_sees_it(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    first = chain(store, 2)[-1]
    changed = [*first.messages[:-1], Message(role="assistant", content="a1 merged"), *turn(2)]
    store.put(StoredResponse(response={"id": "resp_x", "output": []}, input_items=[], messages=changed,
                             parent="resp_1", shared=3))
    cold = ResponseStore(tmp_path / "responses")  # nothing in memory: the chain is read from disk
    assert cold.get("resp_x").messages == changed and raw_row(tmp_path, "resp_x")["shared"] == 3


def test_deleting_a_parent_keeps_its_children_whole_until_they_go(tmp_path):
    store = ResponseStore(tmp_path / "responses")
    records = chain(store, 3)
    assert store.delete("resp_1") is True and store.get("resp_1") is None and store.delete("resp_1") is False
    assert raw_row(tmp_path, "resp_1")["deleted"] is True and "response" not in raw_row(tmp_path, "resp_1")
    assert ResponseStore(tmp_path / "responses").get("resp_2") == records[2]  # its chain runs through the deleted row
    assert store.delete("resp_2") is True
    assert raw_row(tmp_path, "resp_1") is None and raw_row(tmp_path, "resp_2") is None  # the tombstone went too
    assert store.get("resp_0") == records[0] and raw_row(tmp_path, "resp_0")["children"] == 0


def test_an_evicted_or_damaged_ancestor_reads_as_absent(tmp_path):
    chain(ResponseStore(tmp_path / "responses"), 4)

    def cold() -> ResponseStore:  # nothing in memory: every ancestor is read from disk
        return ResponseStore(tmp_path / "responses")

    raw = diskcache.Cache(str(tmp_path / "responses"))
    raw.delete("resp_1")  # as an eviction would
    assert cold().get("resp_3") is None and cold().get("resp_2") is None and cold().get("resp_0") is not None
    assert raw_row(tmp_path, "resp_3") is not None  # kept: its own row is sound
    raw.set("resp_1", "{damaged")
    assert cold().get("resp_3") is None
    raw.set("resp_1", json.dumps({**raw_row(tmp_path, "resp_2"), "parent": "resp_3"}))  # a loop
    assert cold().get("resp_3") is None


def test_a_version_1_record_still_reads_and_can_be_continued(tmp_path):
    whole = StoredResponse(response={"id": "resp_old", "output": []}, input_items=[], messages=turn(0))
    diskcache.Cache(str(tmp_path / "responses")).set("resp_old", whole.to_json())
    assert json.loads(whole.to_json())["version"] == 1
    store = ResponseStore(tmp_path / "responses")
    assert store.get("resp_old") == whole
    store.put(StoredResponse(response={"id": "resp_new", "output": []}, input_items=[],
                             messages=turn(0) + turn(1), parent="resp_old", shared=2))
    cold = ResponseStore(tmp_path / "responses")
    assert cold.get("resp_new").messages == turn(0) + turn(1) and raw_row(tmp_path, "resp_new")["version"] == 2


def test_a_parent_not_in_the_store_gives_a_whole_record(tmp_path):
    """A WebSocket ``store: false`` parent, or another tenant's id: the child copies its history."""
    store = ResponseStore(tmp_path / "responses")
    chain(store, 1, tenant="alice", prefix="resp_a")
    for parent in ("resp_local", "resp_a0"):
        store.put(StoredResponse(response={"id": f"resp_{parent}", "output": []}, input_items=[],
                                 messages=turn(0) + turn(1), tenant="bob", parent=parent, shared=2))
        assert store.get(f"resp_{parent}", "bob").messages == turn(0) + turn(1)
    assert store.get("resp_a0", "alice").response["id"] == "resp_a0"

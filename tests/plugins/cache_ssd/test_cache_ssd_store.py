"""SsdStore on real disk with synthetic payloads: commit, dedup, validation, LRU, restart."""

from __future__ import annotations

import random

import pytest

from kvgate.core.cache.snapshot import BadChunk
from kvgate.plugins.cache_ssd.store import SsdStore

from tests.plugins.cache_ssd.ssd_helpers import FORMAT, chunk_payload, pending

C = 8


def open_store(path, capacity=10**9):
    store = SsdStore(path, chunk_tokens=C, capacity_bytes=capacity, state_format=FORMAT)
    store.load_index()
    return store


def chunk_files(path):
    return sorted(p.name for p in (path / "chunks").glob("*/*.kvc"))


def test_commit_read_and_restart(tmp_path):
    tokens = list(range(100, 121))  # 2 full chunks + a tail of 5
    store = open_store(tmp_path)
    record = store.commit(pending("ns-a", tokens, C, cache_key="conv"))
    assert record.generation == 1 and len(record.chunks) == 3
    store.close()
    again = open_store(tmp_path)
    (loaded,) = again.records.values()
    assert loaded.tokens == tokens and loaded.cache_key == "conv" and loaded.generation == 1
    chunks = again.read(loaded, 3)
    assert [t for t, _ in chunks] == [tokens[0:8], tokens[8:16], tokens[16:21]]
    assert b"".join(p for _, p in chunks) == chunk_payload("ns-a", tokens, 0, 21)
    again.close()


def test_shared_prefix_is_stored_once_and_new_turn_writes_only_new_chunks(tmp_path):
    store = open_store(tmp_path)
    system = list(range(16))
    store.commit(pending("ns", system + [50, 51, 52], C))
    before = set(chunk_files(tmp_path))
    store.commit(pending("ns", system + [60, 61], C))
    after = set(chunk_files(tmp_path))
    assert len(before) == 3 and len(after - before) == 1  # only the new tail chunk
    turn2 = system + [50, 51, 52] + list(range(200, 210))
    # the tier passes payloads only for chunks it does not know; the shared ones must come from disk
    store.commit(pending("ns", turn2, C, skip={0, 1}))
    assert len(set(chunk_files(tmp_path)) - after) == 2
    store.commit(pending("other-ns", system, C))
    assert len(set(chunk_files(tmp_path))) == len(after) + 2 + 2  # another namespace shares nothing
    store.close()


def test_missing_payload_for_absent_chunk_refuses_to_commit(tmp_path):
    store = open_store(tmp_path)
    with pytest.raises(FileNotFoundError):
        store.commit(pending("ns", list(range(20)), C, skip={1}))
    assert store.records == {} and store.manifest.generation == 0
    store.close()


def test_lru_capacity_drops_least_recently_used_and_deletes_files(tmp_path):
    store = open_store(tmp_path)
    first = store.commit(pending("ns", list(range(0, 16)), C))
    second = store.commit(pending("ns", list(range(100, 116)), C))
    third = store.commit(pending("ns", list(range(200, 216)), C))
    store.touch(first.id, first.last_used + 100)  # first is now the most recently used
    store.capacity_bytes = store.total_bytes * 2 // 3
    victims = store.over_capacity()
    assert [v.id for v in victims] == [second.id]
    for victim in victims:
        store.drop(victim.id)
    assert set(store.records) == {first.id, third.id}
    assert len(chunk_files(tmp_path)) == 4 and store.total_bytes <= store.capacity_bytes
    store.close()


def test_orphans_and_temporaries_are_removed_at_start(tmp_path):
    store = open_store(tmp_path)
    store.commit(pending("ns", list(range(16)), C))
    store.close()
    stray = tmp_path / "chunks" / "ab" / ("ab" * 32 + ".kvc")
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"half")
    (stray.parent / (stray.name + ".tmp123")).write_bytes(b"x")
    again = open_store(tmp_path)
    assert again.remove_orphans() == 2
    assert len(chunk_files(tmp_path)) == 2 and len(again.records) == 1
    again.close()


def test_a_second_writer_shares_the_store(tmp_path):
    """No exclusive lock any more: two writers (the shared tier's workers) open one store."""
    store = open_store(tmp_path)
    second = SsdStore(tmp_path, chunk_tokens=C, capacity_bytes=10**9, state_format=FORMAT)
    second.load_index()
    reader = SsdStore(tmp_path, chunk_tokens=C, capacity_bytes=10**9, state_format=FORMAT, writer=False)
    reader.close()
    record = second.commit(pending("ns", list(range(16)), C))
    assert store.refresh()[0][0].id == record.id
    second.close()
    store.close()


def test_missing_chunk_file_drops_the_snapshot_at_start(tmp_path):
    store = open_store(tmp_path)
    record = store.commit(pending("ns", list(range(16)), C))
    store.close()
    store.chunk_path(record.chunks[1]).unlink()
    again = open_store(tmp_path)
    assert again.records == {} and "missing" in again.dropped_at_load[0][1]
    again.close()


def test_fuzzed_and_truncated_chunks_are_rejected(tmp_path):
    tokens = list(range(300, 316))
    store = open_store(tmp_path)
    record = store.commit(pending("ns", tokens, C))
    path = store.chunk_path(record.chunks[1])
    original = path.read_bytes()
    rng = random.Random(7)
    cases = [original[:n] for n in (0, 10, 88, 95, len(original) - 1)] + [original + b"\0"]
    for _ in range(60):
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        cases.append(bytes(damaged))
    for case in cases:
        path.write_bytes(case)
        with pytest.raises(BadChunk):
            store.read(record, 2)
    path.write_bytes(original)
    assert store.read(record, 2)[1][0] == tokens[8:16]
    store.close()


def test_chunk_of_another_snapshot_is_rejected(tmp_path):
    store = open_store(tmp_path)
    a = store.commit(pending("ns", list(range(16)), C))
    b = store.commit(pending("ns", list(range(50, 66)), C))
    store.chunk_path(a.chunks[1]).write_bytes(store.chunk_path(b.chunks[1]).read_bytes())
    with pytest.raises(BadChunk):
        store.read(a, 2)
    store.close()


def test_damaged_chunk_is_removed_so_a_later_commit_rewrites_it(tmp_path):
    store = open_store(tmp_path)
    tokens = list(range(16))
    record = store.commit(pending("ns", tokens, C))
    other = store.commit(pending("ns", tokens + [99], C))
    path = store.chunk_path(record.chunks[0])
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x40  # same size: a size check alone would let a commit reuse it
    path.write_bytes(bytes(data))
    dropped = store.remove_chunk(record.chunks[0])
    assert {r.id for r in dropped} == {record.id, other.id} and not path.exists()
    again = store.commit(pending("ns", tokens, C))
    assert store.read(again, 2)[0][0] == tokens[:8]
    store.close()


def test_unreadable_manifest_is_moved_aside_and_the_store_starts_empty(tmp_path, caplog):
    store = open_store(tmp_path)
    store.commit(pending("ns", list(range(16)), C))
    store.close()
    for db in (tmp_path / "manifest").glob("cache.db*"):
        db.write_bytes(b"this is not sqlite" * 100)
    again = open_store(tmp_path)
    assert again.records == {} and list(tmp_path.glob("manifest.corrupt-*"))
    assert "unreadable" in caplog.text
    assert again.remove_orphans() == 2  # the chunks of the lost snapshot
    again.close()


def test_malformed_and_pickled_records_are_dropped_at_start(tmp_path):
    import pickle

    store = open_store(tmp_path)
    good = store.commit(pending("ns", list(range(16)), C))
    store.manifest.cache.set("snap:bad-json", b"{not json")
    store.manifest.cache.set("snap:wrong-shape", b'{"v": 1, "id": 5}')
    store.manifest.cache.set("snap:pickled", pickle.dumps({"v": 1}))  # bytes: stored raw, not unpickled
    store.manifest.cache.set("snap:object", {"v": 1})  # stored by diskcache as a pickle: refused
    store.manifest.cache.set(("snap:", "tuple key"), b"{}")  # a pickled key: never unpickled, ignored
    store.close()
    again = open_store(tmp_path)
    assert set(again.records) == {good.id}
    assert {key for key, _ in again.dropped_at_load} == {"snap:bad-json", "snap:wrong-shape", "snap:pickled",
                                                         "snap:object"}
    again.close()

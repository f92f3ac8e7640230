"""Several workers on one SSD store (real disk, real SQLite; two stores stand for two workers):
shared chunks stored once, others' writes seen, eviction that spares live workers' chunks."""

from __future__ import annotations

import os
import time

import pytest

from kvgate.core.cache.snapshot import BadChunk
from kvgate.plugins.cache_ssd.store import SsdStore

from tests.plugins.cache_ssd.ssd_helpers import FORMAT, chunk_payload, pending

C = 8


def worker(path, name, capacity=10**9, lease=60.0):
    store = SsdStore(path, chunk_tokens=C, capacity_bytes=capacity, state_format=FORMAT, worker_id=name,
                     lease_seconds=lease)
    store.load_index()
    return store


def chunk_files(path):
    return {p.name for p in (path / "chunks").glob("*/*.kvc")}


def evict(store):
    for victim in store.over_capacity():
        store.drop(victim.id)


def test_a_prefix_two_workers_compute_is_stored_once_and_seen_by_both(tmp_path):
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    tokens = list(range(100, 124))
    first = a.commit(pending("ns", tokens, C, cache_key="conv"))
    added, removed = b.refresh()
    assert [r.id for r in added] == [first.id] and removed == []
    assert b.read(added[0], 3)[2][1] == chunk_payload("ns", tokens, 16, 24)
    files = chunk_files(tmp_path)
    again = b.commit(pending("ns", tokens, C, cache_key="conv"))  # the same prefix computed on B
    assert again.id == first.id and chunk_files(tmp_path) == files
    assert a.ledger.holders(first.id).keys() == {"a", "b"} and a.ledger.ref(first.chunks[0])[0] == 1
    a.close()
    b.close()


def test_eviction_by_one_worker_never_removes_chunks_a_live_worker_references(tmp_path):
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    kept = [a.commit(pending("ns", list(range(k * 100, k * 100 + 16)), C)) for k in range(3)]
    shared_prefix = list(range(0, 8))
    for k in range(12):  # B fills the store far past its bound; some of its snapshots share A's chunk
        b.refresh()
        b.capacity_bytes = 1  # B must evict everything it may
        b.commit(pending("ns", shared_prefix + [5000 + k] * 8 if k % 2 else list(range(9000 + k * 20, 9016 + k * 20)), C))
        evict(b)
    a.refresh()
    for record in kept:
        assert len(a.read(record, 2)) == 2  # every chunk of A's records is still there and valid
    assert set(a.records) >= {r.id for r in kept}
    b.refresh()
    assert {r.id for r in b.over_capacity()}.isdisjoint(r.id for r in kept)
    a.close()
    b.close()


def test_a_dead_workers_records_become_evictable_and_their_files_go(tmp_path):
    a = worker(tmp_path, "a", lease=0.5)
    record = a.commit(pending("ns", list(range(16)), C))
    files = chunk_files(tmp_path)
    b = worker(tmp_path, "b", capacity=1)
    assert b.over_capacity() == []  # A is live: nothing B may take
    time.sleep(0.7)  # A's lease runs out (a SIGKILLed worker stops renewing it)
    assert [v.id for v in b.over_capacity()] == [record.id]
    evict(b)
    assert chunk_files(tmp_path).isdisjoint(files) and b.ledger.total_bytes() == 0
    b.close()
    a.manifest.close()


def test_a_drop_by_one_worker_keeps_a_record_another_live_worker_restored(tmp_path):
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    record = a.commit(pending("ns", list(range(16)), C))
    b.refresh()
    b.touch(record.id, time.time())  # B restored it: B holds it too
    assert a.drop(record.id) is None  # kept: B is live and holds it
    assert len(b.read(b.records[record.id], 2)) == 2
    b.close()  # B leaves; A's next drop removes it
    a.refresh()
    a.touch(record.id, time.time())
    assert a.drop(record.id) is not None and not chunk_files(tmp_path)
    b2 = worker(tmp_path, "b2")
    assert b2.records == {}
    a.close()
    b2.close()


def test_a_drop_seen_by_the_other_worker_and_a_stale_read_is_refused(tmp_path):
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    record = a.commit(pending("ns", list(range(16)), C))
    b.refresh()
    stale = b.records[record.id]
    a.drop(record.id)
    with pytest.raises(BadChunk):
        b.read(stale, 2)  # a lookup that raced the drop reads nothing wrong
    added, removed = b.refresh()
    assert added == [] and [r.id for r in removed] == [record.id] and b.records == {}
    a.close()
    b.close()


def test_start_spares_another_live_workers_young_files(tmp_path):
    a = worker(tmp_path, "a")
    a.commit(pending("ns", list(range(16)), C))
    in_flight = tmp_path / "chunks" / "ab" / ("ab" * 32 + ".kvc.tmp77-0")
    unnamed_yet = tmp_path / "chunks" / "cd" / ("cd" * 32 + ".kvc")
    for path in (in_flight, unnamed_yet):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"being written by a")
    b = worker(tmp_path, "b")
    assert b.remove_orphans() == 0 and in_flight.exists() and unnamed_yet.exists()
    old = time.time() - 3600
    os.utime(in_flight, (old, old))
    assert b.remove_orphans() == 1 and not in_flight.exists() and unnamed_yet.exists()
    assert len(chunk_files(tmp_path)) == 3  # A's two chunks are referenced: never orphans
    a.close()
    b.close()


def test_a_chunk_another_worker_deleted_meanwhile_is_rewritten_at_commit(tmp_path):
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    tokens = list(range(16))
    record = a.commit(pending("ns", tokens, C))
    b.refresh()
    a.drop(record.id)  # its chunks are gone; B's view still names them
    again = b.commit(pending("ns", tokens, C))  # B carries the payloads: written again
    assert [t for t, _ in a.read(again, 2)] == [tokens[:8], tokens[8:]]
    with pytest.raises(FileNotFoundError):  # a chunk that is neither stored nor given: no commit
        b.commit(pending("ns", list(range(50, 66)), C, skip={0}))
    a.close()
    b.close()

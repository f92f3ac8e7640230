"""A backup that fails part-way through its chunk writes leaves nothing behind (issue 31,
finding 9), on the real tier and store (real disk, real SQLite), while another worker shares the
store: the files it wrote go at once (start-up orphan removal would spare them for
``ORPHAN_GRACE`` while another worker is live), and chunks another record names stay. The failure
here is a real one (a snapshot whose fifth chunk's payload is missing fails after writing its
third and fourth); the full disk itself is in ``test_cache_ssd_full_disk_server``."""

from __future__ import annotations

from kvgate.plugins.cache_ssd.store import SsdStore
from kvgate.plugins.cache_ssd.tier import SsdTier

from tests.plugins.cache_ssd.ssd_helpers import FORMAT, pending

C = 8


def chunk_files(path):
    return {p.name for p in (path / "chunks").glob("*/*")}


def backup(tier: SsdTier, snapshot) -> None:
    tier.pin_known(snapshot.keys)
    assert tier.submit(snapshot, wait=True) and tier.flush()


def test_a_failed_backup_removes_what_it_wrote_while_another_worker_is_live(tmp_path):
    other = SsdStore(tmp_path, chunk_tokens=C, capacity_bytes=10**9, state_format=FORMAT, worker_id="other")
    shared = other.commit(pending("ns", list(range(16)), C))  # two chunks the failing snapshot shares
    tier = SsdTier(tmp_path, C, 10**9, FORMAT, prefix_rounds=4, worker_id="me")
    try:
        before = chunk_files(tmp_path)
        backup(tier, pending("ns", list(range(48)), C, skip={4}))  # writes chunks 2 and 3, then fails
        assert chunk_files(tmp_path) == before and len(before) == len(shared.chunks) == 2
        assert tier.stats()["snapshots"] == 1  # the other worker's
        backup(tier, pending("ns", list(range(40)), C))  # the next backup commits
        assert tier.stats()["snapshots"] == 2 and len(chunk_files(tmp_path)) == 5
    finally:
        tier.close()
        other.close()

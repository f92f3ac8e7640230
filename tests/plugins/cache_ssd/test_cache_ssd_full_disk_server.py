"""A full disk under the SSD tier (issue 31, finding 9), against the real server.

The disk is a FAKE (``fake_full_disk/sitecustomize.py``): the suite cannot mount a small file
system, so the chunk writes of the real server raise ``OSError(ENOSPC)`` once the chunk files
would pass a byte budget, which the test sets while the server runs. Then:

- a backup that fails part-way leaves no chunk file behind (before: its first chunks stayed,
  unreferenced, and kept the disk full), and the next backup that fits the space succeeds;
- a restarted server reads the tier (cached tokens from SSD), and evicts least recently used
  snapshots when free space falls under ``[cache] ssd_min_free_bytes``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.core.cache.real_helpers import long_text
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
FAKE = Path(__file__).parent / "fake_full_disk"
CHUNK_TOKENS = 64
PLENTY = 10**12


def start(workdir: Path, state: Path, budget: Path, min_free: int) -> ServerProcess:
    budget.write_text(str(PLENTY))
    settings = {"cache": {"chunk_tokens": CHUNK_TOKENS, "ssd_min_free_bytes": min_free}}
    env = {"PYTHONPATH": str(FAKE), "KVGATE_FAKE_SSD_DISK_FILE": str(budget)}
    return ServerProcess(workdir, settings, state_dir=state, env=env)


def chat(server, text: str) -> dict:
    reply = httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={
        "model": "smollm2", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": text}]})
    assert reply.status_code == 200, reply.text
    return reply.json()


def metric(server, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def wait_for(server, name: str, at_least: float, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while metric(server, name) < at_least:
        assert time.time() < deadline, f"{name} stayed under {at_least}"
        time.sleep(0.2)


def chunk_files(state: Path) -> dict[str, int]:
    """Every file under the chunk directory (temporary ones included), with its size."""
    return {path.name: path.stat().st_size for path in (state / "ssd" / "chunks").glob("*/*")}


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("full-disk") / "state"


def test_a_failed_backup_leaves_no_orphan_and_the_next_one_fits(state, tmp_path):
    budget = tmp_path / "budget"
    with start(tmp_path / "first", state, budget, min_free=0) as server:
        chat(server, long_text(1, 200))
        wait_for(server, "kvgate_cache_ssd_backups_total", 1)
        assert settled(server, "kvgate_cache_ssd_backups_total") == 1
        before = chunk_files(state)
        chunk = max(before.values())
        budget.write_text(str(sum(before.values()) + int(2.5 * chunk)))  # room for two chunks more
        chat(server, long_text(2, 200))  # about eight chunks: fails on the third
        wait_for(server, "kvgate_cache_ssd_backup_failures_total", 1)
        assert chunk_files(state) == before  # the two it wrote are gone with the failure
        chat(server, long_text(3, 25))  # one chunk and a bit: fits only if the failure freed its room
        wait_for(server, "kvgate_cache_ssd_backups_total", 2)
        assert metric(server, "kvgate_cache_ssd_backup_failures_total") == 1
        assert set(chunk_files(state)) > set(before) and metric(server, "kvgate_cache_ssd_snapshots") == 2


def test_a_restarted_server_reads_the_tier_and_evicts_by_free_space(state, tmp_path):
    budget = tmp_path / "budget"
    before = chunk_files(state)
    chunk = max(before.values())
    with start(tmp_path / "again", state, budget, min_free=3 * chunk) as server:
        assert metric(server, "kvgate_cache_ssd_snapshots") == 2
        usage = chat(server, long_text(1, 200))["usage"]
        assert usage["kvgate"]["cached_tokens_ssd"] >= 6 * CHUNK_TOKENS, usage  # read back from SSD
        backups = settled(server, "kvgate_cache_ssd_backups_total")
        disk = sum(chunk_files(state).values()) + 4 * chunk
        budget.write_text(str(disk))
        chat(server, long_text(4, 50))  # about two chunks: fits, then less than 3 chunks are free
        wait_for(server, "kvgate_cache_ssd_backups_total", backups + 1)
        assert metric(server, "kvgate_cache_ssd_backup_failures_total") == 0
        wait_for(server, 'kvgate_cache_evictions_total{tier="ssd"}', 1, timeout=30)
        assert disk - sum(chunk_files(state).values()) >= 3 * chunk  # free space restored


def settled(server, name: str, quiet: float = 3.0) -> float:
    """``name``'s value once it stopped changing for ``quiet`` seconds (a backup may be queued)."""
    value, since = metric(server, name), time.time()
    while time.time() - since < quiet:
        time.sleep(0.3)
        if (now := metric(server, name)) != value:
            value, since = now, time.time()
    return value

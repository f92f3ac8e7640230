"""Disk damage never stops the server (issue 13, finding 10): the real server starts over a damaged
state directory on a real disk and serves.

A state directory is filled once by a real server (SSD snapshots of a long prompt, one stored
Responses record), then each test damages a copy of it and starts a fresh server over the copy:

- a directory where a chunk file should be (was: IsADirectoryError in orphan removal);
- 300 flipped bytes in the SSD manifest database, chosen so that reading it raises
  UnicodeDecodeError from inside diskcache as in the finding (was: crash; now set aside);
- 300 flipped bytes in the responses store database (set aside);
- a read-only ``ssd_path`` and responses directory (each disabled with a warning).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import diskcache
import httpx
import pytest

from kvgate.plugins.cache_ssd.store import SsdStore
from tests.core.cache.real_helpers import long_text
from tests.faults.disk_damage import first_failing_flip, flip_bytes, read_only, read_only_supported
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SETTINGS = {"cache": {"chunk_tokens": 64}}
SYSTEM = long_text(17, 60)


def chat(server) -> httpx.Response:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}]
    return httpx.post(server.base_url + "/v1/chat/completions", timeout=300,
                      json={"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 0})


def respond(server) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/responses", timeout=300,
                      json={"model": "smollm2", "input": "Say hi.", "max_output_tokens": 2})


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A state directory a real server wrote: SSD snapshots and a stored response."""
    work = tmp_path_factory.mktemp("filled")
    with ServerProcess(work, SETTINGS, state_dir=work / "state") as server:
        assert chat(server).status_code == 200 and respond(server).status_code == 200
    assert list((work / "state" / "ssd" / "chunks").glob("*/*.kvc"))
    return work / "state"


def copy_state(filled: Path, tmp_path: Path) -> Path:
    state = tmp_path / "state"
    shutil.copytree(filled, state)
    return state


def serves(tmp_path: Path, state: Path) -> str:
    """Start a server over ``state``; it must answer Chat and Responses with 200. Returns its log."""
    with ServerProcess(tmp_path / "run", SETTINGS, state_dir=state) as server:
        reply, created = chat(server), respond(server)
        assert reply.status_code == 200, reply.text
        assert created.status_code == 200, created.text
        fetched = httpx.get(f"{server.base_url}/v1/responses/{created.json()['id']}", timeout=30)
        assert fetched.status_code in (200, 404)  # 404 only where the store is disabled
        log = server.log()
    assert "Traceback" not in log.split("cache tier")[0]  # nothing crashed before the tiers were built
    return log + f"\nGET stored response: {fetched.status_code}"


def test_a_directory_where_a_chunk_file_should_be(filled, tmp_path):
    state = copy_state(filled, tmp_path)
    chunk = sorted((state / "ssd" / "chunks").glob("*/*.kvc"))[0]
    chunk.unlink()
    chunk.mkdir()
    (chunk / "inside").write_bytes(b"x")
    stray = state / "ssd" / "chunks" / "ab" / ("ab" * 32 + ".kvc")
    stray.mkdir(parents=True)
    log = serves(tmp_path, state)
    assert not stray.exists()  # removed like any other unreferenced chunk file
    assert not chunk.is_dir()  # removed too (and written again, as a file, when the prompt was backed up)
    assert "dropping snapshot" in log and not list(state.glob("ssd.damaged-*")), log  # the rest is kept


def manifest_read_error(root: Path):
    try:
        store = SsdStore(root, 64, 1 << 30)
        store.load_index()
        store.close()
    except UnicodeDecodeError as exc:  # the finding's fault
        return exc
    return None


def test_flipped_bytes_in_the_manifest_database(filled, tmp_path):
    state = copy_state(filled, tmp_path)
    database = state / "ssd" / "manifest" / "cache.db"
    seed = first_failing_flip(database, tmp_path / "scratch" / "manifest",
                              lambda scratch: manifest_read_error(scratch.parent))
    flip_bytes(database, 300, seed)
    log = serves(tmp_path, state)
    assert "UnicodeDecodeError" in log and "moved it to" in log, log
    assert len(list(state.glob("ssd.damaged-*"))) == 1 and (state / "ssd" / "manifest").is_dir()


def responses_read_error(directory: Path):
    try:
        with diskcache.Cache(str(directory)) as cache:
            for key in cache.iterkeys():
                pass
    except Exception as exc:
        return exc
    return None


def test_flipped_bytes_in_the_responses_store(filled, tmp_path):
    state = copy_state(filled, tmp_path)
    database = state / "responses" / "cache.db"
    seed = first_failing_flip(database, tmp_path / "scratch" / "responses", responses_read_error)
    flip_bytes(database, 300, seed)
    log = serves(tmp_path, state)
    assert "responses store at" in log and "is damaged" in log, log
    assert list(state.glob("responses.damaged-*")) and "GET stored response: 200" in log, log


@pytest.mark.skipif(not read_only_supported(), reason="needs chattr to make a directory read-only as root")
def test_read_only_ssd_path_and_responses_store(filled, tmp_path):
    state = copy_state(filled, tmp_path)
    with read_only(state / "ssd", state / "responses"):
        log = serves(tmp_path, state)
    assert "cache tier ssd disabled" in log and "not writable" in log, log
    assert "stored responses are disabled" in log and "GET stored response: 404" in log, log

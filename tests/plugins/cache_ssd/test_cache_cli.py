"""``kvgate cache ls | inspect | diagnose | clear`` over a real store (synthetic payloads)."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from kvgate.plugins.cache_ssd import cli as cache_cli
from kvgate.plugins.cache_ssd.store import SsdStore
from tests.plugins.cache_ssd.ssd_helpers import FORMAT, pending


@pytest.fixture()
def store_dir(tmp_path):
    path = tmp_path / "ssd"
    store = SsdStore(path, chunk_tokens=8, capacity_bytes=10**9, state_format=FORMAT)
    store.commit(pending("ns-a", list(range(20)), 8, cache_key="conv-1"))
    store.commit(pending("ns-a", list(range(20)) + [5, 6, 7], 8, cache_key="conv-1", round_=2))
    store.close()
    return path


def run(*args):
    root = click.Group()
    cache_cli.register_commands(root)
    return CliRunner().invoke(root, ["cache", *args])


def test_ls_lists_snapshots_as_text_and_json(store_dir):
    result = run("--path", str(store_dir), "ls")
    assert result.exit_code == 0 and "2 snapshots" in result.output and "conv-1" in result.output
    rows = json.loads(run("--path", str(store_dir), "ls", "--json").output)
    assert sorted(r["tokens"] for r in rows) == [20, 23] and {r["round"] for r in rows} == {1, 2}


def test_inspect_shows_chunks_shared_between_snapshots(store_dir):
    rows = json.loads(run("--path", str(store_dir), "ls", "--json").output)
    longest = max(rows, key=lambda r: r["tokens"])
    info = json.loads(run("--path", str(store_dir), "inspect", longest["id"][:10], "--json").output)
    assert [c["shared_by"] for c in info["chunk_files"]] == [2, 2, 1]
    missing = run("--path", str(store_dir), "inspect", "ffff")
    assert missing.exit_code == 1 and "no snapshot" in missing.output


def test_diagnose_finds_a_damaged_chunk(store_dir):
    assert run("--path", str(store_dir), "diagnose").exit_code == 0
    victim = sorted((store_dir / "chunks").glob("*/*.kvc"))[0]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    result = run("--path", str(store_dir), "diagnose")
    assert result.exit_code == 1 and "BAD" in result.output and "checksum" in result.output


def test_clear_refuses_while_a_server_holds_the_store_then_clears(store_dir):
    server = SsdStore(store_dir, chunk_tokens=8, capacity_bytes=10**9, state_format=FORMAT)
    busy = run("--path", str(store_dir), "clear", "--yes")
    assert busy.exit_code == 1 and "stop the server first" in busy.output
    server.close()
    assert "deleted 2 snapshots" in run("--path", str(store_dir), "clear", "--yes").output
    assert "0 snapshots" in run("--path", str(store_dir), "ls").output
    assert not list((store_dir / "chunks").glob("*/*.kvc"))


def test_missing_store_is_a_clear_error(tmp_path):
    result = run("--path", str(tmp_path / "nothing"), "ls")
    assert result.exit_code == 1 and "no SSD cache" in result.output


def test_installed_command_line_has_the_cache_commands(store_dir):
    out = subprocess.run([sys.executable, "-m", "kvgate.core.cli", "cache", "--path", str(store_dir), "ls"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "2 snapshots" in out.stdout

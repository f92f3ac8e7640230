"""bench/bench_decode_http.py: a smallest run on kvgate alone (a smoke run: what it prints, not how
fast; llama-server is not built here) and the llama-server flags it uses for each workload."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from bench_decode_http import PEER_DECODE_FLAGS, llama_server_flags  # noqa: E402: bench/ is no package

ROW = re.compile(r"^\| (?P<workload>[^|]+) \| (?P<prompt>\d+) \| (?P<rate>[\d.]+) \|$")


def test_each_workload_gets_its_own_slots_and_the_same_threads():
    assert llama_server_flags(1, 2)[:6] == ["-np", "1", "-t", "2", "-tb", "2"]
    assert llama_server_flags(8, 4)[:6] == ["-np", "8", "-t", "4", "-tb", "4"]
    assert llama_server_flags(8, 4)[6:] == PEER_DECODE_FLAGS


@pytest.mark.slow
def test_a_smallest_kvgate_run_prints_a_row_per_workload_on_the_named_gguf():
    run = subprocess.run([sys.executable, "bench/bench_decode_http.py", "--systems", "kvgate", "--tokens", "6",
                          "--contexts", "40", "--concurrency", "2", "--repeats", "1", "--gguf", "q4_1",
                          "--threads", "2"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("# decode benchmark") and "2 threads, SmolLM2-135M-Instruct.Q4_1.gguf" in lines[0]
    rows = {m["workload"]: m for m in map(ROW.match, lines) if m}
    assert set(rows) == {"batch-1 @ 40 ctx", "2 concurrent"}, run.stdout
    assert 20 <= int(rows["batch-1 @ 40 ctx"]["prompt"]) <= 40
    assert all(float(row["rate"]) > 0 for row in rows.values())
    first_token = [line for line in lines if line.startswith("cold time to first token, batch-1 @ 40 ctx: kvgate ")]
    assert len(first_token) == 1 and float(first_token[0].split()[-2]) > 0, run.stdout

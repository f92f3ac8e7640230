"""bench/bench_state_stride.py on a small random Qwen3.5 checkpoint (a smoke run: what it prints,
not how fast): the forks replay the distances asked, and the stride table's memory shares follow
the layout (a stride twice as long halves the snapshots' share of the K/V bytes); and
bench/agent_models.py writes checkpoints the server's tokenizer reads as SmolLM2's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

FORK = re.compile(r"^\| (?P<distance>[\d,]+) \| (?P<seconds>[\d.]+) \| (?P<rate>[\d-]+) \| (?P<share>[\d.]+) \|$")
STRIDE = re.compile(r"^\| (?P<stride>[\d,]+) \| (?P<tokens>[\d,]+) \((?P<replay>[\d.]+)\) \| (?P<shares>.+) \|$")


def test_a_small_run_prints_the_forks_and_the_stride_table():
    run = subprocess.run([sys.executable, "bench/bench_state_stride.py", "--small", "--tokens", "320", "--repeats", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    forks = {int(m["distance"].replace(",", "")): m for m in map(FORK.match, lines) if m}
    assert set(forks) == {0, 64, 256}, run.stdout
    assert all(float(m["share"]) < 1.5 for m in forks.values()), run.stdout  # a replay never costs a whole prefill
    strides = {int(m["stride"].replace(",", "")): m for m in map(STRIDE.match, lines) if m}
    assert sorted(strides) == [256, 512, 1024, 2048, 4096, 8192], run.stdout
    for stride in (256, 1024):
        shares = [float(s) for s in strides[stride]["shares"].split(" | ")]
        doubled = [float(s) for s in strides[2 * stride]["shares"].split(" | ")]
        assert len(shares) == 3 and all(abs(a / 2 - b) <= 0.011 for a, b in zip(shares, doubled)), run.stdout


def test_the_agent_checkpoints_share_smollm2s_tokenizer_and_sizes():
    import json

    from agent_models import checkpoint

    hybrid, dense = (json.loads((Path(checkpoint(f)) / "config.json").read_text()) for f in ("qwen3_5", "qwen3"))
    assert hybrid["model_type"] == "qwen3_5_text" and dense["model_type"] == "qwen3"
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        assert hybrid[key] == dense[key], key
    assert hybrid["vocab_size"] == 49152

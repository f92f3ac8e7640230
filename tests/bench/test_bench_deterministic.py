"""bench/bench_deterministic.py --family: a small random Qwen3 checkpoint written by transformers and
measured end to end in both modes (a smoke run: what it prints, not how fast), and the mid-size
checkpoints' per-token work in the range that makes their timings say something about real models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

ROW = re.compile(r"^\| (?P<name>[^|]+) \| (?P<default>[\d.]+) \| (?P<exact>[\d.]+) \| (?P<ratio>[\d.]+) \|$")


def test_a_quick_family_run_prints_both_modes_and_a_ratio_for_each_measure():
    run = subprocess.run([sys.executable, "bench/bench_deterministic.py", "--family", "qwen3", "--quick", "--small",
                          "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert any(line.startswith("# ") and "qwen3" in line and "MFLOP/token" in line for line in lines), run.stdout
    assert "| measure | default | deterministic | deterministic / default |" in lines
    rows = {m["name"]: m for m in map(ROW.match, lines) if m}
    assert set(rows) == {"cold prefill 64 (s)", "decode batch-1 (tok/s)", "decode batch-8 (tok/s)"}, run.stdout
    for row in rows.values():
        default, exact, ratio = (float(row[k]) for k in ("default", "exact", "ratio"))
        assert ratio > 0
        if default >= 1:  # tok/s: the printed ratio is of the printed medians (seconds may round to 0.00x)
            assert abs(ratio - exact / default) <= 0.01 + 0.01 * ratio


def test_a_checkpoint_is_written_once_per_config():
    from family_checkpoints import checkpoint

    small = checkpoint("qwen3", small=True)
    written = (Path(small) / "tokenizer.json").stat().st_mtime_ns
    assert checkpoint("qwen3", small=True) == small
    assert (Path(small) / "tokenizer.json").stat().st_mtime_ns == written
    assert (Path(small) / "config.json").is_file()


def test_every_registered_family_has_a_mid_size_checkpoint_of_20_to_100_mflop_per_token():
    from family_checkpoints import FAMILIES, flops_per_token

    registered = {"qwen3", "qwen3_moe", "glm4_moe", "minimax_m2", "gpt_oss", "gemma4", "deepseek_v3",
                  "deepseek_v32", "deepseek_v4", "qwen3_5", "qwen3_5_moe", "qwen3_next"}
    assert set(FAMILIES) == registered
    flops = {name: flops_per_token(name) / 1e6 for name in FAMILIES}
    assert all(20 <= value <= 100 for value in flops.values()), flops

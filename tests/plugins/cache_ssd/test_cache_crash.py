"""SIGKILL at random points while snapshots of real state are written: never a wrong or partial state.

A child process commits snapshots (real exported SmolLM2 state, chunks of 16 tokens) in a loop
under a small capacity, so drops happen too; the parent kills it at random moments, then reopens
the store like a restarted server and reads every snapshot the manifest names.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kvgate.plugins.cache_ssd.store import SsdStore
from tests.plugins.cache_ssd.crash_writer import CHUNK, LENGTHS
from tests.core.cache.real_helpers import assert_same_logits, full_prefill_logits, long_text, text_tokens

pytestmark = pytest.mark.slow
WRITER = Path(__file__).with_name("crash_writer.py")
ROOT = Path(__file__).resolve().parents[3]


def write_state_file(runtime, path: Path):
    tokens = text_tokens(runtime, long_text(5, 80))[:64]
    session = runtime.new_session()
    runtime.prefill(session, tokens)
    spans = {(s, min(s + CHUNK, n)) for n in LENGTHS for s in range(0, n, CHUNK)}
    ranges, blob = [], b""
    for start, end in sorted(spans):
        data = runtime.export_chunk(session, start, end)
        ranges.append([start, end, len(blob), len(data)])
        blob += data
    runtime.release(session)
    capacity = runtime.state_bytes(10 * CHUNK)
    header = {"tokens": tokens, "state_format": runtime.state_format, "capacity": capacity,
              "ranges": ranges}
    path.write_bytes(json.dumps(header).encode() + b"\n" + blob)
    return tokens, {(s, e): blob[o:o + n] for s, e, o, n in ranges}


def kill_writer_once(store_dir: Path, state_file: Path, seed: int, rng: random.Random) -> int:
    proc = subprocess.Popen([sys.executable, str(WRITER), str(store_dir), str(state_file), str(seed)],
                            stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.02, 0.6))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    return out.count("committed")


def check_store(store_dir: Path, tokens, ranges, state_format) -> tuple[int, int]:
    store = SsdStore(store_dir, CHUNK, 10**12, state_format)
    try:
        records = store.load_index()
        assert store.dropped_at_load == []  # a committed snapshot is never half there
        store.remove_orphans()
        for record in records:
            n = len(record.tokens)
            assert record.tokens == tokens[:n]
            for index, (chunk_tokens, payload) in enumerate(store.read(record, len(record.chunks))):
                start, end = record.chunk_span(index)
                assert chunk_tokens == tokens[start:end] and payload == ranges[(start, end)]
        return len(records), store.manifest.generation
    finally:
        store.close()


def test_sigkill_while_writing_never_leaves_wrong_or_partial_state(tmp_path, cache_runtime):
    rt = cache_runtime
    state_file, store_dir = tmp_path / "state.bin", tmp_path / "ssd"
    tokens, ranges = write_state_file(rt, state_file)
    rng = random.Random(2024)
    generation, commits, seen = 0, 0, 0
    for round_ in range(22):
        commits += kill_writer_once(store_dir, state_file, round_, rng)
        count, new_generation = check_store(store_dir, tokens, ranges, rt.state_format)
        assert new_generation >= generation
        generation, seen = new_generation, max(seen, count)
    assert commits > 20 and seen > 0

    store = SsdStore(store_dir, CHUNK, 10**12, rt.state_format)
    record = max(store.load_index(), key=lambda r: len(r.tokens))
    session = rt.new_session()
    with torch.inference_mode():
        for chunk_tokens, payload in store.read(record, len(record.chunks)):
            rt.import_chunk(session, chunk_tokens, payload)
    store.close()
    n = len(record.tokens)
    extra = tokens[:3]
    logits = rt.prefill(session, extra)
    rt.release(session)
    assert_same_logits(logits, full_prefill_logits(rt, tokens[:n] + extra))

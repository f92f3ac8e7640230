"""Several writer processes on one shared SSD store, SIGKILLed at random while they write: every
snapshot read is right (the exact exported state) or refused, never wrong or partial.

Three children of :mod:`tests.plugins.cache_ssd.crash_writer` (each its own worker, real SmolLM2 state,
chunks of 16 tokens, a small capacity so that they evict too) run at once; each round kills a
random one and starts a replacement. Between kills a reader checks the live store; at the end a
restarted worker finds no half-written snapshot, and a restored one gives a full prefill's logits.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from kvgate.core.cache.snapshot import BadChunk
from kvgate.plugins.cache_ssd.store import SsdStore
from tests.plugins.cache_ssd.crash_writer import CHUNK
from tests.core.cache.real_helpers import assert_same_logits, full_prefill_logits
from tests.plugins.cache_ssd.test_cache_crash import ROOT, WRITER, check_store, write_state_file

pytestmark = pytest.mark.slow
WRITERS, KILLS = 3, 20  # the shared store must survive 20 SIGKILLs of random writers


def start_writer(store_dir, state_file, seed: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(WRITER), str(store_dir), str(state_file), str(seed)],
                            stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    assert proc.stdout.readline().strip() == "ready"
    return proc


def check_live_store(store_dir, tokens, ranges, state_format) -> int:
    """Read every snapshot while the others write: right, or refused because it changed meanwhile."""
    reader = SsdStore(store_dir, CHUNK, 10**12, state_format, writer=False)
    try:
        generation = reader.ledger.generation()
        records, refused = reader.load_index(drop_bad=False), 0
        for record in records:
            try:
                chunks = reader.read(record, len(record.chunks))
            except BadChunk:
                assert reader.ledger.generation() > generation  # only a concurrent drop explains it
                refused += 1
                continue
            assert record.tokens == tokens[:len(record.tokens)]
            for index, (chunk_tokens, payload) in enumerate(chunks):
                start, end = record.chunk_span(index)
                assert chunk_tokens == tokens[start:end] and payload == ranges[(start, end)]
        return len(records) - refused
    finally:
        reader.manifest.close()


def test_sigkills_of_random_writers_on_a_shared_store_never_serve_wrong_state(tmp_path, cache_runtime):
    rt = cache_runtime
    state_file, store_dir = tmp_path / "state.bin", tmp_path / "ssd"
    tokens, ranges = write_state_file(rt, state_file)
    rng, seed, served, commits = random.Random(7), 0, 0, 0
    writers: list[subprocess.Popen] = []
    deadline = time.monotonic() + 420
    try:
        for _ in range(KILLS):
            while len(writers) < WRITERS:
                seed += 1
                writers.append(start_writer(store_dir, state_file, seed))
            time.sleep(rng.uniform(0.05, 0.5))
            victim = writers.pop(rng.randrange(len(writers)))
            victim.send_signal(signal.SIGKILL)
            commits += victim.communicate(timeout=30)[0].count("committed")
            served += check_live_store(store_dir, tokens, ranges, rt.state_format)
            assert time.monotonic() < deadline
    finally:
        for proc in writers:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
    count, _generation = check_store(store_dir, tokens, ranges, rt.state_format)  # no half-written snapshot
    assert served > 0 and count > 0 and commits > KILLS
    print(f"shared store: {KILLS} SIGKILLs, {commits} commits by killed writers, {served} snapshots read right "
          f"while others wrote, {count} left at the end")

    store = SsdStore(store_dir, CHUNK, 10**12, rt.state_format)
    record = max(store.load_index(), key=lambda r: len(r.tokens))
    session = rt.new_session()
    with torch.inference_mode():
        for chunk_tokens, payload in store.read(record, len(record.chunks)):
            rt.import_chunk(session, chunk_tokens, payload)
    store.close()
    n, extra = len(record.tokens), tokens[:3]
    logits = rt.prefill(session, extra)
    rt.release(session)
    assert_same_logits(logits, full_prefill_logits(rt, tokens[:n] + extra))

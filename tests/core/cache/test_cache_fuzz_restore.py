"""Damaged snapshot files on the real restore path: never a crash, never a wrong state.

Each round copies a pristine store, damages one chunk file at random (bit flips, truncation,
trailing bytes, random contents, another chunk's contents, an empty or missing file), starts a
fresh manager over it and runs plan -> load (worker thread) -> attach. Either the request goes
colder, or the restored state is byte-for-byte the pristine restore.
"""

from __future__ import annotations

import random
import shutil
import threading

import pytest

from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


def damage(path, other, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    kind = rng.choice(["flip", "flip", "truncate", "append", "random", "swap", "empty", "missing", "header"])
    if kind in ("flip", "header"):
        span = 96 if kind == "header" else len(data)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(span)] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "append":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "random":
        data = bytearray(rng.randbytes(len(data)))
    elif kind == "swap":
        data = bytearray(other.read_bytes())
    elif kind == "empty":
        data = bytearray()
    if kind == "missing":
        path.unlink()
    else:
        path.write_bytes(bytes(data))
    return kind


def restore(manager, tokens):
    plan = manager.plan(NS, tokens, None)
    if plan.needs_load:
        worker = threading.Thread(target=manager.load, args=(plan,))
        worker.start()
        worker.join()
    session = manager.attach(plan)
    return plan, session


def test_damaged_chunk_files_never_crash_or_restore_wrong_state(tmp_path, cache_runtime):
    rt = cache_runtime
    pristine = tmp_path / "pristine"
    manager = make_manager(cache_config(pristine, chunk_tokens=16), rt)
    _, _, stored = run_request(manager, rt, text_tokens(rt, long_text(12, 30))[:56], output_tokens=1)
    manager.close()  # backs the resident entry up and flushes
    probe = stored + text_tokens(rt, " and more")
    manager = make_manager(cache_config(pristine, chunk_tokens=16), rt)
    plan, session = restore(manager, probe)
    assert plan.source == "ssd" and plan.cached_tokens == len(stored)
    reference = rt.export_state(session)
    manager.discard(session)
    manager.close()

    rng = random.Random(99)
    outcomes = {"colder": 0, "restored": 0}
    for round_ in range(40):
        copy = tmp_path / f"round{round_}"
        shutil.copytree(pristine, copy)
        chunks = sorted((copy / "ssd" / "chunks").glob("*/*.kvc"))
        damage(rng.choice(chunks), rng.choice(chunks), rng)
        manager = make_manager(cache_config(copy, chunk_tokens=16), rt)
        plan, session = restore(manager, probe)
        assert session.tokens == probe[: session.length] and session.length == plan.cached_tokens
        if plan.source == "ssd":
            assert rt.export_state(session) == reference
            outcomes["restored"] += 1
        else:
            outcomes["colder"] += 1
        manager.discard(session)
        manager.close()
        shutil.rmtree(copy)
    assert outcomes["colder"] >= 30  # nearly every damage is caught (a swap with itself is harmless)

"""Stored state of an older SSD format, or of another runtime state format, is dropped at start
with a log line -- never misread -- and the request is computed as if nothing were stored."""

from __future__ import annotations

import base64
import json
import struct
import time
import zlib

import pytest

from kvgate.core.cache.namespace import chain_root, chunk_keys, pack_tokens
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd.manifest import GENERATION_KEY
from kvgate.plugins.cache_ssd.records import PREFIX
from kvgate.plugins.cache_ssd.store import SsdStore
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, assert_same_logits, full_prefill_logits, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow
CHUNK = 32
V1_HEADER = struct.Struct("<4sHHIIQ32s32s")  # version 1: bytes_per_token, per-token payloads only


def v1_chunk(key: bytes, tokens: list[int], payload: bytes) -> bytes:
    head = V1_HEADER.pack(b"KVGC", 1, 0, len(tokens), len(payload) // len(tokens), len(payload), chain_root(NS), key)
    body = head + pack_tokens(tokens) + payload
    return body + struct.pack("<I", zlib.crc32(body))


def v1_record(tokens: list[int], keys: list[bytes], state_bytes: int) -> bytes:
    now = time.time()
    return json.dumps({"v": 1, "id": keys[-1].hex()[:32], "namespace": NS, "cache_key": None,
                       "tokens": base64.b64encode(pack_tokens(tokens)).decode(), "round": 1, "bytes": state_bytes,
                       "generation": 1, "chunk_tokens": CHUNK, "chunks": [k.hex() for k in keys],
                       "created": now, "last_used": now}).encode()


def exported(rt, tokens):
    """(per-token KV of each chunk, export_chunk of each chunk) of the real state of ``tokens``."""
    session = rt.new_session()
    rt.prefill(session, tokens)
    spans = [(s, min(s + CHUNK, len(tokens))) for s in range(0, len(tokens), CHUNK)]
    kv = [rt.export_state(session, s, e) for s, e in spans]
    chunks = [rt.export_chunk(session, s, e) for s, e in spans]
    rt.release(session)
    return kv, chunks


def write_snapshot(root, rt, tokens, kind: str) -> None:
    keys = chunk_keys(NS, tokens, CHUNK)
    kv, chunks = exported(rt, tokens)
    if kind == "version 1 snapshot":  # record and chunks as the previous build wrote them
        store = SsdStore(root, CHUNK, 10**12)
        for index, key in enumerate(keys):
            store.files.write(key, v1_chunk(key, tokens[index * CHUNK:(index + 1) * CHUNK], kv[index]))
        store.manifest.cache.set(PREFIX + keys[-1].hex()[:32], v1_record(tokens, keys, sum(map(len, kv))))
        store.manifest.cache.set(GENERATION_KEY, 1)
        store.close()
        return
    state_format = rt.state_format if kind == "version 1 chunk" else "llama-kv/0 an older layout"
    store = SsdStore(root, CHUNK, 10**12, state_format)
    store.commit(PendingSnapshot(namespace=NS, tokens=tokens, cache_key=None, round=1, chunk_tokens=CHUNK, keys=keys,
                                 payloads=dict(enumerate(chunks)), state_bytes=rt.state_bytes(len(tokens)),
                                 state_format=state_format))
    if kind == "version 1 chunk":  # a current record naming a chunk file of the previous format
        store.files.write(keys[1], v1_chunk(keys[1], tokens[CHUNK:2 * CHUNK], kv[1]))
    store.close()


@pytest.mark.parametrize("kind", ["version 1 snapshot", "version 1 chunk", "another state format"])
def test_stale_snapshot_is_dropped_and_the_request_is_computed(tmp_path, cache_runtime, caplog, kind):
    rt = cache_runtime
    tokens = text_tokens(rt, long_text(12, 60))[:3 * CHUNK + 5]
    write_snapshot(tmp_path / "ssd", rt, tokens, kind)
    manager = make_manager(cache_config(tmp_path, chunk_tokens=CHUNK), rt)
    assert manager.ssd.store.records == {} and len(manager.ssd.store.dropped_at_load) == 1
    assert "dropping snapshot" in caplog.text and "stale" in manager.ssd.store.dropped_at_load[0][1]
    assert manager.ssd.orphans_removed == 4  # the stale chunk files are gone too
    probe = tokens + text_tokens(rt, " and then")
    plan, logits, _ = run_request(manager, rt, probe)
    assert plan.source == "cold" and plan.cached_tokens == 0
    assert_same_logits(logits, full_prefill_logits(rt, probe))
    manager.close()

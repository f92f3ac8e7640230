"""The cache manager's KV events (``add_event_sink``) on the real runtime and device tier, read
through the gRPC worker's publisher: blocks are announced once and withdrawn when no entry holds
them."""

from __future__ import annotations

import asyncio

import pytest

from kvgate.adapters.grpc_worker.events import KvEventPublisher
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


class Recorder:
    def __init__(self):
        self.calls = []

    def stored(self, tier, namespace, tokens):
        self.calls.append(("stored", tier, namespace, list(tokens)))

    def removed(self, tier, namespace, tokens):
        self.calls.append(("removed", tier, namespace, list(tokens)))


def test_the_manager_tells_its_sinks_what_the_device_tier_admits_and_evicts(tmp_path, cache_runtime):
    rt = cache_runtime
    manager = make_manager(cache_config(tmp_path), rt, ssd=False)
    recorder = Recorder()
    manager.add_event_sink(recorder)
    _, _, held = run_request(manager, rt, text_tokens(rt, long_text(1, 30)))
    assert recorder.calls == [("stored", "device", NS, held)]
    manager.reclaim(10**9)  # evicts every entry
    assert recorder.calls[-1] == ("removed", "device", NS, held)
    manager.close()


def test_blocks_shared_by_two_entries_are_withdrawn_only_with_the_last(tmp_path, cache_runtime):
    rt = cache_runtime
    manager = make_manager(cache_config(tmp_path), rt, ssd=False)
    publisher = KvEventPublisher(NS, rt.block_size)
    batches = []

    async def subscribe():
        return publisher.subscribe(1)  # from the first batch: the history replays it

    manager.add_event_sink(publisher)
    prefix = text_tokens(rt, long_text(2, 40))
    _, _, first = run_request(manager, rt, prefix + text_tokens(rt, " left: " + long_text(3, 20)), output_tokens=1)
    _, _, second = run_request(manager, rt, prefix + text_tokens(rt, " right: " + long_text(4, 20)), output_tokens=1)
    shared = min(i for i, (a, b) in enumerate(zip(first, second)) if a != b) // 16
    assert len(first) // 16 > shared and len(second) // 16 > shared  # each entry has blocks of its own
    entries = sorted(manager.resident.entries(), key=lambda e: e.last_used)
    manager._evict(entries[0], back_up=False)  # the first entry goes; the shared blocks stay held
    queue = asyncio.run(subscribe())
    while not queue.empty():
        batches.append(queue.get_nowait())
    one, two, three = (b.events[0] for b in batches)
    assert len(one.stored.blocks) == len(first) // 16 and not one.stored.HasField("parent_block_hash")
    assert len(two.stored.blocks) == len(second) // 16 - shared  # only the new tail is announced
    assert two.stored.parent_block_hash == one.stored.blocks[shared - 1].block_hash
    assert list(three.removed.block_hashes) == [b.block_hash for b in one.stored.blocks[shared:]]
    assert publisher.held_blocks() == len(second) // 16
    other = KvEventPublisher("another-namespace", rt.block_size)
    other.stored("device", NS, second)  # a namespace a gRPC request cannot use is not published
    assert other.sequence == 0
    manager.close()

"""The worker's KV events: what the device tier holds, as SMG's ``KvEventBatch`` stream.

The publisher is a :class:`kvgate.core.cache.events.KvEventSink`. It cuts each entry's tokens into
full blocks of ``block_size`` (the partial tail is not announced) and chains them:
``block_hash[i] = H(block_hash[i-1], tokens of block i)``, so a block's hash names its whole
prefix. Entries share prefixes, so blocks are reference-counted: a block is announced
(``KvBlocksStored``, with its ``token_ids`` and the parent's hash) when the first entry holding
it arrives and withdrawn (``KvBlocksRemoved``) when the last one goes. Only the namespace a gRPC
request runs in is published (another tenant's blocks cannot serve it).

Every change becomes one batch with the next ``sequence_number``; subscribers get the batches
after their ``start_sequence_number`` that the bounded history still holds, then live ones.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import threading
import time
from typing import Sequence

from smg_grpc_proto.generated import common_pb2

HISTORY = 1024  # batches kept for a subscriber that resumes


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """A signed 64-bit hash of a block and everything before it."""
    digest = hashlib.blake2b(parent.to_bytes(8, "little", signed=True) + b"".join(
        t.to_bytes(4, "little") for t in tokens), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class KvEventPublisher:
    def __init__(self, namespace: str, block_size: int):
        self.namespace, self.block_size = namespace, block_size
        self.seed = chain_hash(0, list(namespace.encode()))
        self.refs: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()
        self.sequence = 0
        self.history: collections.deque = collections.deque(maxlen=HISTORY)
        self.subscribers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []

    # --- the sink (engine thread) ---------------------------------------------------------------
    def blocks(self, tokens: Sequence[int]) -> list[tuple[int, list[int]]]:
        out, parent = [], self.seed
        for start in range(0, len(tokens) - self.block_size + 1, self.block_size):
            block = list(tokens[start:start + self.block_size])
            parent = chain_hash(parent, block)
            out.append((parent, block))
        return out

    def stored(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        if namespace != self.namespace:
            return
        with self.lock:
            chain = self.blocks(tokens)
            new = [i for i, (h, _) in enumerate(chain) if self.refs[h] == 0]
            self.refs.update(h for h, _ in chain)
            if new:  # held blocks form a prefix, so the new ones are the chain's tail
                first = new[0]
                event = common_pb2.KvBlocksStored(
                    blocks=[common_pb2.KvBlock(block_hash=h, token_ids=b, block_size=self.block_size, cache_level=0)
                            for h, b in chain[first:]],
                    tier=common_pb2.KV_CACHE_TIER_DEVICE, medium=tier, locality=common_pb2.KV_CACHE_LOCALITY_LOCAL)
                if first > 0:
                    event.parent_block_hash = chain[first - 1][0]
                self._publish(common_pb2.KvCacheEvent(stored=event))

    def removed(self, tier: str, namespace: str, tokens: Sequence[int]) -> None:
        if namespace != self.namespace:
            return
        with self.lock:
            freed = []
            for h, _ in self.blocks(tokens):
                if h not in self.refs:  # held before this publisher was attached
                    continue
                self.refs[h] -= 1
                if self.refs[h] <= 0:
                    del self.refs[h]
                    freed.append(h)
            if freed:
                self._publish(common_pb2.KvCacheEvent(removed=common_pb2.KvBlocksRemoved(
                    block_hashes=freed, cache_level=0, tier=common_pb2.KV_CACHE_TIER_DEVICE, medium=tier,
                    locality=common_pb2.KV_CACHE_LOCALITY_LOCAL)))

    def _publish(self, event: common_pb2.KvCacheEvent) -> None:
        self.sequence += 1
        event.event_id = self.sequence
        batch = common_pb2.KvEventBatch(sequence_number=self.sequence, timestamp=time.time(), events=[event],
                                        dp_rank=0)
        self.history.append(batch)
        for loop, queue in list(self.subscribers):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, batch)
            except RuntimeError:  # that subscriber's loop is closed
                pass

    # --- subscribers (event loop) ---------------------------------------------------------------
    def subscribe(self, start_sequence: int) -> asyncio.Queue:
        """A queue of the batches numbered ``start_sequence`` and later (0: live ones only)."""
        queue: asyncio.Queue = asyncio.Queue()
        with self.lock:
            if start_sequence > 0:
                for batch in self.history:
                    if batch.sequence_number >= start_sequence:
                        queue.put_nowait(batch)
            self.subscribers.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        with self.lock:
            self.subscribers = [(loop, q) for loop, q in self.subscribers if q is not queue]

    def held_blocks(self) -> int:
        with self.lock:
            return len(self.refs)

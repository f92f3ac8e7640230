"""KVPool: lazy growth in slabs, reference counts, copy-on-write copies and exhaustion."""

from __future__ import annotations

import pytest
import torch

from kvgate.models.kv_pool import KVPool, PoolExhausted


def make_pool(capacity_tokens=64, slab_blocks=4) -> KVPool:
    return KVPool(layers=2, kv_heads=1, head_dim=4, block_size=4, capacity_tokens=capacity_tokens,
                  dtype=torch.float32, device="cpu", slab_blocks=slab_blocks)


def test_pool_grows_lazily_up_to_capacity():
    pool = make_pool()
    assert pool.blocks_allocated == 0 and pool.free_blocks() == 16
    blocks = pool.allocate(3)
    assert pool.blocks_allocated == 4 and len(set(blocks)) == 3
    more = pool.allocate(13)
    assert pool.blocks_allocated == 16 and not set(blocks) & set(more)
    with pytest.raises(PoolExhausted, match="1 blocks wanted, 0 free of 16"):
        pool.allocate(1)
    assert pool.stats()["block_bytes"] == 2 * 2 * 4 * 4 * 4


def test_refcounts_and_copy_on_write():
    pool = make_pool()
    (block,) = pool.allocate(1)
    slots = torch.arange(block * 4, block * 4 + 4)
    values = torch.randn(2, 2, 4, 1, 4)
    pool.write(slots, values)
    pool.retain([block])
    copy = pool.copy_block(block)
    assert copy != block and torch.equal(pool.read(torch.arange(copy * 4, copy * 4 + 4)), values)
    pool.release([block])
    assert pool.refcount[block] == 1 and block not in pool.free
    pool.release([block, copy])
    assert pool.free_blocks() == 16
    with pytest.raises(RuntimeError, match="released more often"):
        pool.release([block])


def test_grown_storage_is_zeroed_and_keeps_old_blocks():
    pool = make_pool(slab_blocks=1)
    (first,) = pool.allocate(1)
    values = torch.randn(2, 2, 4, 1, 4)
    pool.write(torch.arange(first * 4, first * 4 + 4), values)
    pool.allocate(5)
    assert torch.equal(pool.read(torch.arange(first * 4, first * 4 + 4)), values)
    handed_out = pool.storage[:, :, : pool.blocks_allocated * 4]
    assert pool.blocks_allocated == 6 and not torch.isnan(handed_out).any()
    assert torch.count_nonzero(handed_out) == values.numel()  # all but the written block is zero


def test_slots_and_span_follow_the_block_table():
    pool = make_pool()
    assert pool.slots([3, 1, 7], 2, 9).tolist() == [14, 15, 4, 5, 6, 7, 28]
    assert pool.span([3, 4, 5], 10) == slice(12, 22)
    assert pool.span([3, 5, 6], 10) is None
    assert pool.span([3, 4, 9], 8) == slice(12, 20)  # only the blocks holding [0, end) count


def test_freed_blocks_come_back_in_order():
    pool = make_pool()
    first = pool.allocate(5)
    pool.release(first)
    assert pool.allocate(5) == first

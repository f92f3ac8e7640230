"""A pool of fixed-size blocks of per-token KV for all layers of one model.

Storage is one tensor ``[layers, 2 (k/v), slots, kv_heads, head_dim]`` where a block is
``block_size`` consecutive slots (``parts`` = 1 for a runtime with one cached vector per token and
layer, e.g. MLA's latent). Its full ``capacity_tokens`` are reserved at construction but
left untouched (on CPU untouched pages take no memory); blocks are handed out lazily in slabs,
each zero-filled when first handed out (so padding slots never hold NaN). Growing therefore never
copies what is already there, and a block's slots never move. Blocks are reference-counted; a
session sharing a partial last block copies it before writing (copy-on-write). The storage is only
touched in inference mode (an inference tensor cannot be written outside it).
"""

from __future__ import annotations

import torch

from kvgate.core.runtime import OutOfBlocks


class PoolExhausted(OutOfBlocks):
    """No free block is left and the pool is at its capacity (``kv_pool_tokens``)."""


class KVPool:
    def __init__(self, layers: int, kv_heads: int, head_dim: int, block_size: int,
                 capacity_tokens: int, dtype: torch.dtype, device: torch.device | str,
                 slab_blocks: int = 256, parts: int = 2):
        if block_size <= 0 or capacity_tokens < block_size:
            raise ValueError(f"kv pool needs capacity_tokens >= block_size > 0, got {capacity_tokens}, {block_size}")
        self.layers, self.kv_heads, self.head_dim, self.parts = layers, kv_heads, head_dim, parts
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self.dtype, self.device = dtype, torch.device(device)
        self.slab_blocks = slab_blocks
        with torch.inference_mode():
            self.storage = torch.empty(layers, parts, self.capacity_blocks * block_size, kv_heads, head_dim,
                                       dtype=dtype, device=self.device)
        self.refcount: list[int] = []
        self.free: list[int] = []
        self.layer_views = [tuple(self.storage[i, p] for p in range(parts)) for i in range(layers)]

    # --- sizes ----------------------------------------------------------------------------------
    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.parts * self.kv_heads * self.head_dim * self.storage.element_size()

    @property
    def block_bytes(self) -> int:
        return self.bytes_per_token * self.block_size

    @property
    def blocks_allocated(self) -> int:
        return len(self.refcount)

    def free_blocks(self) -> int:
        """Blocks that can still be handed out (free now or not yet allocated)."""
        return len(self.free) + self.capacity_blocks - self.blocks_allocated

    def stats(self) -> dict[str, int]:
        return {"blocks_total": self.capacity_blocks, "blocks_free": self.free_blocks(),
                "block_bytes": self.block_bytes, "blocks_allocated": self.blocks_allocated}

    # --- allocation -----------------------------------------------------------------------------
    @torch.inference_mode()
    def _grow(self, wanted: int) -> None:
        current = self.blocks_allocated
        target = min(self.capacity_blocks, max(current + wanted, current * 2, self.slab_blocks))
        self.storage[:, :, current * self.block_size:target * self.block_size].zero_()
        self.free.extend(range(target - 1, current - 1, -1))
        self.refcount.extend([0] * (target - current))

    def allocate(self, count: int) -> list[int]:
        if count > self.free_blocks():
            raise PoolExhausted(
                f"KV pool exhausted: {count} blocks wanted, {self.free_blocks()} free of {self.capacity_blocks}"
            )
        if count > len(self.free):
            self._grow(count - len(self.free))
        blocks = [self.free.pop() for _ in range(count)]
        for block in blocks:
            self.refcount[block] = 1
        return blocks

    def retain(self, blocks: list[int]) -> None:
        for block in blocks:
            self.refcount[block] += 1

    def release(self, blocks: list[int]) -> None:
        for block in reversed(blocks):  # freed last-first, so the next allocation pops them in order
            self.refcount[block] -= 1
            if self.refcount[block] == 0:
                self.free.append(block)
            elif self.refcount[block] < 0:
                raise RuntimeError(f"KV block {block} released more often than retained")

    @torch.inference_mode()
    def copy_block(self, source: int) -> int:
        """A private copy of block ``source`` (the caller drops its reference to ``source``)."""
        (target,) = self.allocate(1)
        bs = self.block_size
        self.storage[:, :, target * bs:(target + 1) * bs] = self.storage[:, :, source * bs:(source + 1) * bs]
        return target

    # --- slots ----------------------------------------------------------------------------------
    def slots(self, block_table: list[int], start: int, end: int) -> torch.Tensor:
        """Slot indices of token positions [start, end) of a block table, as a long tensor."""
        bs = self.block_size
        first, last = start // bs, -(-end // bs)
        blocks = torch.tensor(block_table[first:last], dtype=torch.long, device=self.device)
        slots = (blocks[:, None] * bs + torch.arange(bs, device=self.device)).view(-1)
        return slots[start - first * bs:end - first * bs]

    def span(self, block_table: list[int], end: int) -> slice | None:
        """The slot range of positions [0, end) when its blocks are consecutive in the pool, else None.

        A fresh pool hands out consecutive blocks, so long prompts usually read their context as a
        view instead of a gathered copy.
        """
        count = -(-end // self.block_size)
        if count == 0:
            return None
        first = block_table[0]
        if block_table[:count] != list(range(first, first + count)):
            return None
        return slice(first * self.block_size, first * self.block_size + end)

    @torch.inference_mode()
    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """KV of ``slots`` for every layer: ``[layers, parts, n, kv_heads, head_dim]``."""
        return self.storage.index_select(2, slots)

    @torch.inference_mode()
    def write(self, slots: torch.Tensor, kv: torch.Tensor) -> None:
        self.storage.index_copy_(2, slots, kv.to(self.dtype))

    def rows_from_bytes(self, raw: torch.Tensor, count: int) -> torch.Tensor:
        """What :meth:`write` takes for ``count`` tokens' exported bytes ``raw`` (uint8, C order of :meth:`read`)."""
        return raw.view(self.dtype).view(self.layers, self.parts, count, self.kv_heads, self.head_dim).to(self.device)

"""A :class:`KVPool` whose layers differ in shape: Gemma 4's sliding layers keep ``head_dim`` wide
heads, its full layers ``global_head_dim`` wide ones (and maybe other KV heads).

One storage tensor per shape, ``[layers of that shape, 2, slots, kv_heads, head_dim]``, all indexed
by the same blocks: the allocator, refcounts and slots are the base pool's. ``layer_views[i]`` is
the (k, v) of the i-th layer that writes K/V. Every layer keeps every token's K/V, the sliding
layers' included (the window is a mask), so a session can still be cut at any token. A token's
bytes (:meth:`read`) are each shape's storage in turn, C order.
"""

from __future__ import annotations

import torch

from kvgate.models.kv_pool import KVPool


class ShapedKVPool(KVPool):
    def __init__(self, shapes: list[tuple[int, int]], block_size: int, capacity_tokens: int, dtype: torch.dtype,
                 device: torch.device | str, slab_blocks: int = 256):
        """``shapes[i]``: (kv_heads, head_dim) of the i-th layer that writes K/V."""
        if block_size <= 0 or capacity_tokens < block_size:
            raise ValueError(f"kv pool needs capacity_tokens >= block_size > 0, got {capacity_tokens}, {block_size}")
        self.layers, self.parts, self.block_size = len(shapes), 2, block_size
        self.kv_heads, self.head_dim = shapes[0]  # of the first layer; :attr:`shapes` has them all
        self.shapes = list(dict.fromkeys(shapes))
        self.capacity_blocks = capacity_tokens // block_size
        self.dtype, self.device, self.slab_blocks = dtype, torch.device(device), slab_blocks
        slots = self.capacity_blocks * block_size
        with torch.inference_mode():
            self.storages = [torch.empty(shapes.count(s), 2, slots, *s, dtype=dtype, device=self.device)
                             for s in self.shapes]
        self.storage = self.storages[0]
        self.refcount: list[int] = []
        self.free: list[int] = []
        seen = {s: 0 for s in self.shapes}
        self.layer_views = []
        for shape in shapes:
            storage = self.storages[self.shapes.index(shape)]
            self.layer_views.append((storage[seen[shape], 0], storage[seen[shape], 1]))
            seen[shape] += 1

    @property
    def bytes_per_token(self) -> int:
        return sum(s.shape[0] * 2 * s.shape[3] * s.shape[4] for s in self.storages) * self.storages[0].element_size()

    @torch.inference_mode()
    def _grow(self, wanted: int) -> None:
        current = self.blocks_allocated
        target = min(self.capacity_blocks, max(current + wanted, current * 2, self.slab_blocks))
        for storage in self.storages:
            storage[:, :, current * self.block_size:target * self.block_size].zero_()
        self.free.extend(range(target - 1, current - 1, -1))
        self.refcount.extend([0] * (target - current))

    @torch.inference_mode()
    def copy_block(self, source: int) -> int:
        (target,) = self.allocate(1)
        bs = self.block_size
        for storage in self.storages:
            storage[:, :, target * bs:(target + 1) * bs] = storage[:, :, source * bs:(source + 1) * bs]
        return target

    @torch.inference_mode()
    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """The bytes of ``slots``' K/V, as one uint8 tensor: each shape's ``[layers, 2, n, kv_heads, head_dim]``."""
        return torch.cat([s.index_select(2, slots).contiguous().view(-1).view(torch.uint8) for s in self.storages])

    @torch.inference_mode()
    def write(self, slots: torch.Tensor, kv: torch.Tensor) -> None:
        """Write bytes as :meth:`read` gives them (any device) into ``slots``."""
        offset, n = 0, slots.shape[0]
        for storage in self.storages:
            size = storage.shape[0] * 2 * n * storage.shape[3] * storage.shape[4] * storage.element_size()
            part = kv[offset:offset + size].view(self.dtype).view(storage.shape[0], 2, n, *storage.shape[3:])
            storage.index_copy_(2, slots, part.to(self.device))
            offset += size

    def rows_from_bytes(self, raw: torch.Tensor, count: int) -> torch.Tensor:
        """:meth:`write` takes the exported bytes as they are."""
        return raw

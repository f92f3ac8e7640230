"""kvgate's own paged attention over bf16 K/V pools (``paged_attention.h``): one kernel for prefill,
appends and decode, whose arithmetic is fixed (key tiles of 64 from key 0, online softmax tile by
tile, its own exp, fixed-order sums; written down in the header), so a row's output bits depend
only on its query row and the keys and values it sees: not on the batch, the other rows, the
table's width or the thread count. Two arithmetics:

- fp32 FMA, the same bits in every build (``avx512``, ``avx2``, ``scalar``; the variants of
  :data:`kvgate.models.cpu_kernels.kquant.VARIANTS`);
- ``amx`` (``paged_attention_amx.h``): q and the softmax weights rounded to bf16, the products on
  AMX tiles; ~4x faster for a prefill chunk, on CPUs with AMX where the OS grants the tiles.

The variant is named in :attr:`PagedAttentionKernel.fingerprint`, so state of one never serves another.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
from typing import Optional

import torch

from kvgate.models.cpu_kernels.kquant import BEST_FIRST, variant_library

log = logging.getLogger("kvgate.kernels")
ARITHMETIC = "attn1"
SOURCE = "paged_attention.c"


class PagedAttentionKernel:
    """One compiled variant of ``paged_attention.c``: :attr:`variant` its name, :attr:`fingerprint`
    what state computed with it carries (``/attn1-avx512``)."""

    def __init__(self, lib: ctypes.CDLL, variant: str):
        self.variant = variant
        self.fingerprint = f"/{ARITHMETIC}-{variant}"
        self.function = lib.kvgate_paged_attention
        self.function.argtypes = ([ctypes.c_void_p] * 4 + [ctypes.c_int] + [ctypes.c_void_p] * 3
                                  + [ctypes.c_int] * 4 + [ctypes.c_float, ctypes.c_int])
        self.function.restype = ctypes.c_int

    def __call__(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, tables: torch.Tensor,
                 row_seq: torch.Tensor, row_keys: torch.Tensor, scale: float) -> torch.Tensor:
        """fp32 [rows, heads, dim]: each row of ``q`` (fp32 [rows, heads, dim]) attends to keys
        0 .. row_keys[row] - 1 of sequence row_seq[row], key j held in slot tables[seq, j] of the bf16
        pools [slots, kv_heads, dim]. ValueError for shapes or types it does not take. Threads:
        torch's count."""
        rows, heads, dim = _check(q, k_pool, v_pool, tables, row_seq, row_keys)
        q = q.to(torch.float32).contiguous()
        tables = tables.to(torch.int64).contiguous()
        row_seq = row_seq.to(torch.int32).contiguous()
        row_keys = row_keys.to(torch.int32).contiguous()
        out = torch.empty(rows, heads, dim, dtype=torch.float32)
        if self.function(q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), tables.data_ptr(), tables.shape[1],
                         row_seq.data_ptr(), row_keys.data_ptr(), out.data_ptr(), rows, heads, k_pool.shape[1], dim,
                         scale, torch.get_num_threads()):
            raise MemoryError("paged attention: no memory for a working buffer")
        return out


def _check(q, k_pool, v_pool, tables, row_seq, row_keys) -> tuple[int, int, int]:
    """(rows, heads, dim) where the arguments are what the kernel reads safely, else ValueError."""
    if q.dim() != 3 or k_pool.dim() != 3 or tables.dim() != 2:
        raise ValueError("paged attention takes q [rows, heads, dim], pools [slots, kv_heads, dim], tables [seqs, width]")
    rows, heads, dim = q.shape
    slots, kv_heads, pool_dim = k_pool.shape
    tensors = (q, k_pool, v_pool, tables, row_seq, row_keys)
    if any(t.device.type != "cpu" for t in tensors):
        raise ValueError("paged attention runs on CPU tensors")
    if (k_pool.dtype != torch.bfloat16 or v_pool.dtype != torch.bfloat16 or v_pool.shape != k_pool.shape
            or not k_pool.is_contiguous() or not v_pool.is_contiguous()):
        raise ValueError("k_pool and v_pool must be contiguous bf16 tensors of one shape [slots, kv_heads, dim]")
    if pool_dim != dim or dim % 16 or kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"dim {dim} (pools {pool_dim}) must match and be a multiple of 16, and heads {heads} "
                         f"a multiple of kv_heads {kv_heads}")
    if row_seq.shape != (rows,) or row_keys.shape != (rows,):
        raise ValueError("row_seq and row_keys must be [rows]")
    if rows and (int(row_keys.min()) < 1 or int(row_keys.max()) > tables.shape[1]
                 or int(row_seq.min()) < 0 or int(row_seq.max()) >= tables.shape[0]):
        raise ValueError("each row must see 1 .. width keys of a sequence in the tables")
    seen = _seen_slots(tables, row_seq.long(), row_keys.long())
    if seen.numel() and (int(seen.min()) < 0 or int(seen.max()) >= slots):
        raise ValueError("the tables name slots outside the pools")
    return rows, heads, dim


def _seen_slots(tables: torch.Tensor, row_seq: torch.Tensor, row_keys: torch.Tensor) -> torch.Tensor:
    """The slots of the keys the rows see (columns past each sequence's longest row are never read)."""
    longest = torch.zeros(tables.shape[0], dtype=torch.int64).scatter_reduce(0, row_seq, row_keys, "amax")
    return tables[torch.arange(tables.shape[1]) < longest.unsqueeze(1)]


def paged_attention_reference(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, tables: torch.Tensor,
                              row_seq: torch.Tensor, row_keys: torch.Tensor, scale: float) -> torch.Tensor:
    """The same attention in plain torch fp32, row by row (the math, not the kernel's bits)."""
    rows, heads, dim = q.shape
    group = heads // k_pool.shape[1]
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    for row in range(rows):
        slots = tables[int(row_seq[row]), :int(row_keys[row])]
        keys = k_pool[slots].float().repeat_interleave(group, dim=1)  # [n, heads, dim]
        values = v_pool[slots].float().repeat_interleave(group, dim=1)
        weights = torch.softmax(torch.einsum("hd,nhd->hn", q[row].float(), keys) * scale, dim=-1)
        out[row] = torch.einsum("hn,nhd->hd", weights, values)
    return out


def close_to_reference(kernel: PagedAttentionKernel) -> bool:
    """Within fp32 rounding (the amx variant: within bf16 rounding of q and p) of
    :func:`paged_attention_reference` on random pools (a check of the build)."""
    generator = torch.Generator().manual_seed(43)
    k_pool = torch.randn(80, 2, 32, generator=generator).bfloat16()
    v_pool = torch.randn(80, 2, 32, generator=generator).bfloat16()
    tables = torch.randperm(80, generator=generator).reshape(1, 80)
    q = torch.randn(3, 4, 32, generator=generator)
    args = (q, k_pool, v_pool, tables, torch.zeros(3, dtype=torch.int32), torch.tensor([1, 64, 70], dtype=torch.int32),
            1 / math.sqrt(32))
    tolerance = 2e-2 if kernel.variant == "amx" else 1e-5
    return torch.allclose(kernel(*args), paged_attention_reference(*args), rtol=tolerance, atol=tolerance)


@functools.lru_cache(maxsize=None)
def paged_attention_variant(variant: str) -> Optional[PagedAttentionKernel]:
    """``variant`` (a key of kquant's VARIANTS) compiled and checked, or None where the CPU, the
    compiler or the cache refuse it."""
    lib = ready_library(SOURCE, variant, "paged attention")
    if lib is None:
        return None
    kernel = PagedAttentionKernel(lib, variant)
    if not close_to_reference(kernel):
        log.warning("paged attention %s gives wrong results on this CPU; not used", variant)
        return None
    return kernel


@functools.lru_cache(maxsize=None)
def paged_attention_kernel() -> Optional[PagedAttentionKernel]:
    """The best variant this CPU runs, else None."""
    return next(filter(None, map(paged_attention_variant, BEST_FIRST["attention"])), None)


def ready_library(source: str, variant: str, label: str, extra_flags: tuple[str, ...] = ()) -> Optional[ctypes.CDLL]:
    """``source`` (which includes ``paged_attention.h``) compiled as ``variant``, where this process
    may run it: the amx variant asks the OS for AMX tiles, and is refused where the OS says no."""
    lib = variant_library(source, variant, label, extra_flags)
    if lib is not None and lib.kvgate_attention_ready() != 0:
        log.info("%s %s not used: the OS does not grant AMX tiles to this process", label, variant)
        return None
    return lib

"""kvgate's own paged attention (:mod:`kvgate.models.cpu_kernels.paged_attention`), compiled for real:
it computes softmax(q k^T * scale) v over each row's visible keys, a row's bits depend only on its
query and the keys and values it sees (alone, in any batch, through any table width, at any thread
count, as one row of a prefill), every fp32 variant this CPU builds gives the same bits, the amx
variant (bf16 tile products, its own arithmetic) is as invariant and within bf16 rounding of the
math, and garbage in the pools past a row's keys never reaches a row in any of them."""

from __future__ import annotations

import math

import pytest
import torch

from kvgate.models.cpu_kernels import build
from kvgate.models.cpu_kernels.kquant import VARIANTS
from kvgate.models.cpu_kernels.paged_attention import (paged_attention_kernel, paged_attention_reference,
                                                       paged_attention_variant)

pytestmark = pytest.mark.skipif(not build.cpu_has(build.REQUIRED_CPU_FLAGS), reason="CPU without AVX2/FMA")
KEY_COUNTS = (1, 63, 64, 65, 1000)
SLOTS = 8192


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def pools(kv_heads: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(SLOTS, kv_heads, dim, generator=generator).bfloat16(),
            torch.randn(SLOTS, kv_heads, dim, generator=generator).bfloat16())


def queries(rows: int, heads: int, dim: int, seed: int) -> torch.Tensor:
    """Queries large enough that some rows' softmax is peaked, others flat."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, heads, dim, generator=generator) * torch.rand(rows, heads, 1, generator=generator) * 4


def scattered_tables(seqs: int, width: int, seed: int) -> torch.Tensor:
    """Each sequence's keys in slots taken at random from one permutation of the pool."""
    return torch.randperm(SLOTS, generator=torch.Generator().manual_seed(seed))[:seqs * width].reshape(seqs, width)


def int32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def one_row_per_count(heads: int, kv_heads: int, dim: int, seed: int):
    """Arguments for one row of each of KEY_COUNTS, each in its own sequence."""
    k_pool, v_pool = pools(kv_heads, dim, seed)
    q = queries(len(KEY_COUNTS), heads, dim, seed + 1)
    tables = scattered_tables(len(KEY_COUNTS), max(KEY_COUNTS), seed + 2)
    return q, k_pool, v_pool, tables, int32(range(len(KEY_COUNTS))), int32(KEY_COUNTS), 1 / math.sqrt(dim)


RUNNABLE = [name for name in ("avx512", "avx2", "scalar") if build.cpu_has(VARIANTS[name][0])]
MISSING = [name for name in ("avx512", "avx2") if name not in RUNNABLE]
AMX = paged_attention_variant("amx")
ARITHMETICS = [RUNNABLE[0]] + (["amx"] if AMX else [])  # the best fp32 build, and the amx one where it runs


@pytest.mark.parametrize("dim", [64, 80, 128])
@pytest.mark.parametrize("group", [1, 3])
def test_matches_softmax_attention_over_the_visible_keys(dim, group):
    args = one_row_per_count(2 * group, 2, dim, seed=dim + group)
    got = paged_attention_variant(RUNNABLE[0])(*args).double()
    expected = paged_attention_reference(*args).double()
    values = args[2].float().abs().amax()
    assert ((got - expected).abs() <= 1e-5 * expected.abs() + 1e-6 * values).all()


@pytest.mark.skipif(AMX is None, reason="no AMX tiles on this CPU or from this OS")
@pytest.mark.parametrize("dim", [64, 80, 128])
@pytest.mark.parametrize("group", [1, 3])
def test_amx_is_within_bf16_rounding_of_softmax_attention(dim, group):
    """Against the math with q rounded to bf16 (as the tiles take it), what is left is p's rounding
    to bf16: a relative 2^-9 of each weight, so at most 2^-8 of the largest value."""
    q, *rest = one_row_per_count(2 * group, 2, dim, seed=dim + group)
    got = AMX(q, *rest).double()
    expected = paged_attention_reference(q.bfloat16().float(), *rest).double()
    values = rest[1].float().abs().amax()
    assert ((got - expected).abs() <= 2 ** -8 * values).all()
    assert (got - expected).abs().max() > 0  # the bf16 weights do show


@pytest.mark.parametrize("variant", ARITHMETICS)
def test_a_row_has_the_same_bits_alone_in_any_batch_table_width_thread_count_and_prefill(variant):
    heads, kv_heads, dim, keys = 9, 3, 64, 700
    kernel = paged_attention_variant(variant)
    k_pool, v_pool = pools(kv_heads, dim, seed=1)
    wide = scattered_tables(3, 1500, seed=2)  # seq 0 is the row's; columns past its keys hold other slots
    q = queries(256, heads, dim, seed=3)  # q[255] is the row, at position keys - 1
    positions = torch.arange(keys - 256, keys, dtype=torch.int32)
    alone = kernel(q[255:], k_pool, v_pool, wide[:1, :keys], int32([0]), int32([keys]), 0.125)

    others = queries(4, heads, dim, seed=4)
    batch = torch.cat([others[:2], q[255:], others[2:]])
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            mixed = kernel(batch, k_pool, v_pool, wide, int32([1, 2, 0, 2, 1]), int32([1500, 5, keys, 1, 64]), 0.125)
            assert torch.equal(bits(mixed[2:3]), bits(alone)), count
            prefill = kernel(q, k_pool, v_pool, wide, torch.zeros(256, dtype=torch.int32), positions + 1, 0.125)
            assert torch.equal(bits(prefill[255:]), bits(alone)), count
    finally:
        torch.set_num_threads(threads)
    for row in (0, 1, 2, 3, 100, 201):  # rows in every place of a block of four, each alone
        single = kernel(q[row:row + 1], k_pool, v_pool, wide[:1], int32([0]), positions[row:row + 1] + 1, 0.125)
        assert torch.equal(bits(prefill[row:row + 1]), bits(single)), row


@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (4, 4, 128), (20, 1, 80)])
def test_every_variant_gives_the_scalar_bits(heads, kv_heads, dim):
    args = one_row_per_count(heads, kv_heads, dim, seed=heads + dim)
    expected = paged_attention_variant("scalar")(*args)
    for variant in RUNNABLE:
        assert torch.equal(bits(paged_attention_variant(variant)(*args)), bits(expected)), variant


@pytest.mark.parametrize("heads,kv_heads,dim", [(9, 3, 64), (20, 1, 80)])
def test_prefill_rows_in_every_variant_are_the_rows_alone(heads, kv_heads, dim):
    """40 rows of one sequence: blocks of rows and heads split into chunks, rows ending inside a tile."""
    k_pool, v_pool = pools(kv_heads, dim, seed=heads)
    q = queries(40, heads, dim, seed=heads + 1)
    tables = scattered_tables(1, 200, seed=heads + 2)
    row_keys = torch.arange(131, 171, dtype=torch.int32)
    scalar = paged_attention_variant("scalar")
    alone = torch.cat([scalar(q[row:row + 1], k_pool, v_pool, tables, int32([0]), row_keys[row:row + 1], 0.1)
                       for row in range(40)])
    for variant in RUNNABLE:
        got = paged_attention_variant(variant)(q, k_pool, v_pool, tables, torch.zeros(40, dtype=torch.int32),
                                               row_keys, 0.1)
        assert torch.equal(bits(got), bits(alone)), variant


@pytest.mark.skipif(not MISSING, reason="this CPU builds every variant")
def test_variants_this_cpu_lacks_are_not_built():
    assert all(paged_attention_variant(name) is None for name in MISSING), MISSING


@pytest.mark.parametrize("variant", ARITHMETICS)
def test_nan_and_inf_past_a_rows_keys_never_reach_it(variant):
    kernel = paged_attention_variant(variant)
    q, k_pool, v_pool, tables, row_seq, row_keys, scale = one_row_per_count(6, 2, 64, seed=5)
    clean = kernel(q, k_pool, v_pool, tables, row_seq, row_keys, scale)
    unseen = torch.cat([tables[seq, n:] for seq, n in enumerate(KEY_COUNTS)])
    k_dirty, v_dirty = k_pool.clone(), v_pool.clone()
    k_dirty[unseen] = float("nan")
    k_dirty[unseen[::2], :, ::3] = float("inf")
    v_dirty[unseen] = float("-inf")
    v_dirty[unseen[::3]] = float("nan")
    dirty = kernel(q, k_dirty, v_dirty, tables, row_seq, row_keys, scale)
    assert torch.equal(bits(dirty), bits(clean))
    assert torch.isfinite(clean).all()


def test_the_best_variant_is_named_in_the_fingerprint_and_bad_arguments_are_refused():
    kernel = paged_attention_kernel()
    best = "amx" if AMX else "avx512" if "avx512" in RUNNABLE else "avx2"
    assert kernel.variant == best and kernel.fingerprint == f"/attn1-{best}"
    q, k_pool, v_pool, tables, row_seq, row_keys, scale = one_row_per_count(4, 2, 64, seed=6)
    with pytest.raises(ValueError, match="1 .. width keys"):
        kernel(q, k_pool, v_pool, tables, row_seq, row_keys * 0, scale)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        kernel(q[:, :3], k_pool, v_pool, tables, row_seq, row_keys, scale)
    with pytest.raises(ValueError, match="contiguous bf16"):
        kernel(q, k_pool.float(), v_pool, tables, row_seq, row_keys, scale)
    with pytest.raises(ValueError, match="slots outside the pools"):
        kernel(q, k_pool, v_pool, tables + SLOTS, row_seq, row_keys, scale)

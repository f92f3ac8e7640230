"""Runtimes by composition: no family subclasses another's runtime, every family's forward is its own
class or the Llama forward built with its options, and the composed pieces (chunk framing, the paged
sessions' all-or-nothing reservation) refuse what does not fit."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch

from kvgate.core.runtime import ModelRuntime, Session
from kvgate.models import chunk_frames
from kvgate.models.deepseek_v3.runtime import DEEPSEEK_V3
from kvgate.models.deepseek_v32.runtime import DEEPSEEK_V32
from kvgate.models.deepseek_v4.runtime import DEEPSEEK_V4
from kvgate.models.gemma4.runtime import GEMMA4
from kvgate.models.glm4_moe.family import GLM4_MOE
from kvgate.models.gpt_oss.runtime import GPT_OSS
from kvgate.models.kv_pool import KVPool, PoolExhausted
from kvgate.models.kv_runtime import KVRuntime, RuntimeParts
from kvgate.models.loading import LLAMA
from kvgate.models.minimax_m2.family import MINIMAX_M2
from kvgate.models.paged_kv import PagedKV
from kvgate.models.qwen3.families import QWEN3, QWEN3_MOE
from kvgate.models.qwen3_5.runtime import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT

FAMILIES = [LLAMA, QWEN3, QWEN3_MOE, GLM4_MOE, MINIMAX_M2, GPT_OSS, GEMMA4, DEEPSEEK_V3, DEEPSEEK_V32,
            DEEPSEEK_V4, QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_family_composes_its_runtime_and_subclasses_none(family):
    runtime = family.runtime
    if isinstance(runtime, functools.partial):  # a per-token-K/V family: KVRuntime with its parts
        assert runtime.func is KVRuntime and isinstance(runtime.args[0], RuntimeParts)
        assert not runtime.keywords
    else:  # a runtime of its own, directly on the host's contract
        assert inspect.isclass(runtime) and runtime.__bases__ == (ModelRuntime,)
        assert not inspect.isabstract(runtime)


def test_state_names_tell_the_families_apart():
    names = {f.runtime.args[0].state_name for f in FAMILIES if isinstance(f.runtime, functools.partial)}
    names |= {f.runtime.STATE_NAME for f in FAMILIES if not isinstance(f.runtime, functools.partial)}
    # Qwen3 and Qwen3-MoE share a layout and a name; the three hybrids share one runtime
    assert len(names) == len(FAMILIES) - 1 - 2


def test_a_chunk_frame_round_trips_and_refuses_a_bad_header():
    data = chunk_frames.framed_chunk(b"abc", b"de")
    rows, aux = chunk_frames.chunk_parts(data)
    assert (bytes(rows), bytes(aux)) == (b"abc", b"de")
    with pytest.raises(ValueError, match="header"):
        chunk_frames.chunk_parts(data[:10])
    with pytest.raises(ValueError, match="describes"):
        chunk_frames.chunk_parts(data + b"x")


def paged(capacity_tokens: int) -> PagedKV:
    pool = KVPool(1, 1, 2, 4, capacity_tokens, torch.float32, "cpu")
    return PagedKV(pool, 4, vocab_size=10, max_context=64)


def test_a_reservation_that_does_not_fit_takes_nothing():
    sessions = paged(16)
    first, second = sessions.new_session(), sessions.new_session()
    sessions.reserve([first], 8)
    first.tokens.extend(range(8))
    free = sessions.pool.stats()["blocks_free"]
    with pytest.raises(PoolExhausted):
        sessions.reserve([second, first], 8)  # the second fits, the first's growth does not
    assert sessions.pool.stats()["blocks_free"] == free
    assert second.block_table == [] and len(first.block_table) == 2


def test_a_fork_shares_blocks_and_an_append_copies_the_shared_partial_block():
    sessions = paged(64)
    source = sessions.new_session()
    sessions.reserve([source], 6)
    source.tokens.extend(range(6))
    child = sessions.fork(source, 5)
    assert child.block_table == source.block_table
    sessions.reserve([child], 1)
    assert child.block_table[0] == source.block_table[0] and child.block_table[1] != source.block_table[1]


def test_claims_refuse_bad_ids_and_a_full_context():
    sessions = paged(64)
    session = Session(id=99)
    with pytest.raises(ValueError, match="out of range"):
        sessions.claim_prefill(session, [3, 10])
    with pytest.raises(ValueError, match="context full"):
        sessions.claim_prefill(session, [1] * 65)
    assert session.block_table == []

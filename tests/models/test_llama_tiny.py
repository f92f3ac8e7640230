"""The Llama runtime (KVRuntime with the Llama parts) against transformers on tiny random Llama/Qwen2 models, plus session and pool invariants.

Tolerance: fp32 logits within 1e-4 absolute of transformers' (same math, different op order).
"""

from __future__ import annotations

import pytest
import torch

from kvgate.models.fingerprint import weights_fingerprint
from tests.models.tiny_models import TINY_CONFIGS, load_tiny, reference_logits

TOLERANCE = 1e-4
PROMPT = [5, 17, 3, 88, 42, 42, 7, 61, 29, 30, 31, 9, 2, 77, 14, 50, 23, 8, 11, 66, 70, 1, 4]


@pytest.mark.parametrize("name", list(TINY_CONFIGS))
def test_prefill_logits_match_transformers(tiny_models, name):
    directory, model = tiny_models[name]
    runtime = load_tiny(directory)
    session = runtime.new_session()
    logits = runtime.prefill(session, PROMPT, all_logits=True)
    assert logits.shape == (len(PROMPT), runtime.info.vocab_size) and logits.dtype == torch.float32
    assert torch.allclose(logits, reference_logits(model, PROMPT), atol=TOLERANCE, rtol=0)
    # the deterministic default: the head over one row gives what it gives that row among all rows
    assert torch.equal(runtime.prefill(runtime.new_session(), PROMPT), logits[-1])


@pytest.mark.parametrize("name", ["llama_gqa_tied", "qwen2_bias"])
def test_append_prefill_and_decode_equal_full_prefill(tiny_models, name):
    directory, model = tiny_models[name]
    runtime = load_tiny(directory)
    expected = reference_logits(model, PROMPT)
    session = runtime.new_session()
    parts = [runtime.prefill(session, PROMPT[:5], all_logits=True), runtime.prefill(session, PROMPT[5:6], all_logits=True),
             runtime.prefill(session, PROMPT[6:15], all_logits=True)]
    for position in range(15, len(PROMPT)):
        parts.append(runtime.decode([session], [PROMPT[position]]))
    assert torch.allclose(torch.cat(parts), expected, atol=TOLERANCE, rtol=0)
    assert torch.equal(torch.cat(parts), runtime.prefill(runtime.new_session(), PROMPT, all_logits=True))
    assert session.tokens == PROMPT


def test_scattered_blocks_read_the_same_context_as_consecutive_ones(tiny_models):
    """Consecutive blocks are read as a view, scattered ones are gathered: both give the same logits."""
    directory, model = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory, block_size=4)
    expected = reference_logits(model, PROMPT)
    fresh = runtime.new_session()
    runtime.prefill(fresh, PROMPT[:8])
    assert runtime.pool.span(fresh.block_table, 8) is not None
    spacers = [runtime.new_session() for _ in range(3)]
    scattered = runtime.new_session()
    for part in range(0, 16, 4):  # interleave allocations so this session's blocks are not consecutive
        runtime.prefill(scattered, PROMPT[part:part + 4], all_logits=True)
        runtime.prefill(spacers[part // 4 % 3], [1, 2, 3, 4])
    assert runtime.pool.span(scattered.block_table, 16) is None

    def logits_from_16(session):  # prefill up to position 20, then decode the rest
        rows = runtime.prefill(session, PROMPT[session.length:20], all_logits=True)[-4:]
        return torch.cat([rows] + [runtime.decode([session], [token]) for token in PROMPT[20:]])

    for session in (scattered, fresh):
        assert torch.allclose(logits_from_16(session), expected[16:], atol=TOLERANCE, rtol=0)


def test_batched_decode_over_different_lengths_and_forks(tiny_models):
    directory, model = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory, block_size=4)
    expected = reference_logits(model, PROMPT)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:10])
    short = runtime.new_session()
    runtime.prefill(short, PROMPT[:3])
    fork_mid = runtime.fork(base, 6)  # shares a partial block with base: copy-on-write on append
    fork_all = runtime.fork(base)
    assert runtime.pool.refcount[base.block_table[0]] == 3
    sessions = [base, short, fork_mid, fork_all]
    for _ in range(6):
        logits = runtime.decode(sessions, [PROMPT[s.length] for s in sessions])
        for row, session in enumerate(sessions):
            assert torch.allclose(logits[row], expected[session.length - 1], atol=TOLERANCE, rtol=0)
    assert base.tokens == fork_all.tokens == PROMPT[:16]
    assert base.block_table[:2] == fork_all.block_table[:2] and base.block_table[2] != fork_all.block_table[2]


def test_truncate_then_continue(tiny_models):
    directory, model = tiny_models["llama_untied_llama3"]
    runtime = load_tiny(directory)
    expected = reference_logits(model, PROMPT)
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:12] + [90, 91, 92])
    runtime.truncate(session, 9)
    assert len(session.block_table) == 3 and session.tokens == PROMPT[:9]
    logits = runtime.prefill(session, PROMPT[9:], all_logits=True)
    assert torch.allclose(logits, expected[9:], atol=TOLERANCE, rtol=0)


def test_export_import_round_trip(tiny_models):
    directory, _ = tiny_models["qwen2_bias"]
    runtime = load_tiny(directory)
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:13])
    data = runtime.export_state(source, 0, 13)
    assert len(data) == 13 * runtime.state_bytes_per_token()
    restored = runtime.new_session()
    runtime.import_state(restored, PROMPT[:7], runtime.export_state(source, 0, 7))
    runtime.import_state(restored, PROMPT[7:13], runtime.export_state(source, 7, 13))
    assert runtime.export_state(restored) == data
    assert torch.equal(runtime.prefill(restored, PROMPT[13:]), runtime.prefill(source, PROMPT[13:]))
    with pytest.raises(ValueError, match="bytes"):
        runtime.import_state(runtime.new_session(), PROMPT[:12], data)
    with pytest.raises(ValueError, match="range"):
        runtime.export_state(source, 3, 99)


def test_pool_refcounts_return_to_all_free(tiny_models):
    directory, _ = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory, block_size=4)
    total = runtime.pool_stats()["blocks_free"]
    first = runtime.new_session()
    runtime.prefill(first, PROMPT[:10])
    assert runtime.session_bytes(first) == 3 * runtime.pool_stats()["block_bytes"]
    forks = [runtime.fork(first, n) for n in (10, 5, 0)]
    runtime.decode(forks[:2] + [first], [3, 4, 5])
    assert runtime.pool_stats()["blocks_free"] < total
    for session in forks + [first]:
        runtime.release(session)
    assert runtime.pool_stats()["blocks_free"] == total
    assert not any(runtime.pool.refcount)


def test_pool_exhausted_is_clear_and_leaves_sessions_consistent(tiny_models):
    from kvgate.models.kv_pool import PoolExhausted

    directory, model = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory, block_size=4, kv_pool_tokens=16)
    first, second = runtime.new_session(), runtime.new_session()
    runtime.prefill(first, PROMPT[:8])
    runtime.prefill(second, PROMPT[:8])
    with pytest.raises(PoolExhausted, match="exhausted"):
        runtime.decode([first, second], [PROMPT[8], PROMPT[8]])
    assert [len(s.block_table) for s in (first, second)] == [2, 2] and first.length == 8
    runtime.release(second)
    logits = runtime.decode([first], [PROMPT[8]])
    assert torch.allclose(logits[0], reference_logits(model, PROMPT[:9])[-1], atol=TOLERANCE, rtol=0)


def test_context_extension(tiny_models):
    directory, model = tiny_models["llama_linear"]
    with pytest.raises(ValueError, match="allow_context_extension"):
        load_tiny(directory, max_context=256)
    runtime = load_tiny(directory, max_context=256, allow_context_extension=True)
    assert runtime.info.max_context == 256 and runtime.info.trained_context == 128
    tokens = [(i * 7) % 90 + 3 for i in range(200)]
    session = runtime.new_session()
    runtime.prefill(session, tokens[:150])
    logits = runtime.prefill(session, tokens[150:])
    assert torch.allclose(logits, reference_logits(model, tokens)[-1], atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="context full"):
        runtime.prefill(session, [3] * 57)


def test_bad_input_is_a_clear_error(tiny_models):
    directory, _ = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory)
    session = runtime.new_session()
    with pytest.raises(ValueError, match="out of range"):
        runtime.prefill(session, [5, 10_000])
    with pytest.raises(ValueError, match="at least one"):
        runtime.prefill(session, [])
    with pytest.raises(ValueError, match="twice"):
        runtime.decode([session, session], [1, 2])
    assert session.length == 0 and session.block_table == []


def test_fingerprint_tracks_weights_and_dtype(tiny_models):
    directory, _ = tiny_models["llama_gqa_tied"]
    runtime, again, bf16 = load_tiny(directory), load_tiny(directory), load_tiny(directory, dtype="bf16")
    assert runtime.fingerprint == again.fingerprint != bf16.fingerprint
    again.weights.layers[1].down[3, 5] += 0.01  # the fingerprint of what a load would digest
    assert weights_fingerprint(again.arch, again.weights, again.dtype) != runtime.weights_print
    assert runtime.fingerprint.startswith(runtime.weights_print)


def test_bf16_runtime_is_close_to_fp32(tiny_models):
    directory, model = tiny_models["qwen2_bias"]
    runtime = load_tiny(directory, dtype="bf16")
    session = runtime.new_session()
    logits = runtime.prefill(session, PROMPT[:20])
    decoded = runtime.decode([session], [PROMPT[20]])[0]
    expected = reference_logits(model, PROMPT[:21])
    assert logits.dtype == torch.float32
    # bf16 keeps ~3 significant digits; the tiny model's logits are O(1)
    assert (logits - expected[19]).abs().max() < 0.1 and (decoded - expected[20]).abs().max() < 0.1

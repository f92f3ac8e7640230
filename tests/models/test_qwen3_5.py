"""The Qwen3.5 runtime against transformers on a tiny random fp32 model (three Gated DeltaNet layers,
one gated full-attention layer; prompts longer than two delta-rule chunks of 64), and the same runtime
serving Qwen3.5-MoE and Qwen3-Next (their experts invariant too: bit-identical across splits, forks and batches).

Tolerance against transformers: fp32 logits within 1e-4. The runtime's own paths (split prefill,
forks and truncations with replay, batched decode, exported and imported state) are bit-identical
to a cold prefill in the deterministic mode (the default), and within 1e-4 without it.
"""

from __future__ import annotations

import logging

import pytest
import torch

from kvgate.core.runtime import PrefillInterrupted
from kvgate.models.qwen3_5 import linear_state
from tests.models.bit_identity import assert_splits_forks_and_batches_bit_identical
from tests.models.tiny_models import VOCAB, reference_logits
from tests.models.tiny_qwen3_5 import RUNTIMES, build_tiny_qwen3_5, build_tiny_qwen3_5_vl, load_tiny_qwen3_5

TOLERANCE = 1e-4
PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(7)).tolist()
CUTS = (1, 3, 63, 64, 65, 100, 129, 149)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qwen3_5")
    model = build_tiny_qwen3_5(directory)
    return directory, model, reference_logits(model, PROMPT)


@pytest.fixture(scope="module")
def runtime(tiny):
    return load_tiny_qwen3_5(tiny[0], state_stride=64)


@pytest.fixture(scope="module")
def whole(runtime):
    return runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)


def same(a, b, deterministic=True):
    return torch.equal(a, b) if deterministic else torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_no_parameter_keeps_its_constant_initialisation(tiny):
    for name, param in tiny[1].named_parameters():
        assert param.numel() == 1 or param.std() > 0, name


def test_prefill_logits_match_transformers(tiny, runtime, whole):
    expected = tiny[2]
    assert whole.shape == (len(PROMPT), VOCAB) and expected.std() > 0.1
    assert torch.allclose(whole, expected, atol=TOLERANCE, rtol=0)
    assert runtime.info.architecture == "qwen3_5" and runtime.deterministic


@pytest.mark.parametrize("deterministic", [True, False])
def test_decode_matches_transformers(tiny, deterministic):
    runtime = load_tiny_qwen3_5(tiny[0], deterministic=deterministic)
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:60])
    steps = torch.stack([runtime.decode([session], [token])[0] for token in PROMPT[60:70]])  # across a chunk end
    assert torch.allclose(steps, tiny[2][60:70], atol=TOLERANCE, rtol=0)


def states_equal(a, b) -> bool:
    return all(torch.equal(x, y) for sa, sb in zip(a, b) for x, y in zip(sa.tensors(), sb.tensors()))


def test_prefill_split_anywhere_gives_the_same_state_and_logits(runtime, whole):
    cold = runtime.new_session()
    runtime.prefill(cold, PROMPT)
    for split in CUTS:
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert torch.equal(torch.cat(parts), whole), f"split at {split}"
        assert states_equal(linear_state.held(session), linear_state.held(cold)), f"split at {split}"
        runtime.release(session)


@pytest.mark.parametrize("deterministic", [True, False])
def test_fork_and_truncate_at_unaligned_lengths_equal_a_cold_prefill(tiny, deterministic):
    runtime = load_tiny_qwen3_5(tiny[0], deterministic=deterministic, state_stride=64)
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:140] + [5, 6, 7])  # snapshots at 64, 128 (stride) and 143 (the end)
    assert sorted(linear_state.snapshots(base)) == [64, 128, 143]
    kept = [0, 64, 128]  # and each fork's point once it replayed there
    for length in (0, 3, 64, 70, 129, 140):
        before = runtime.replayed_tokens
        fork = runtime.fork(base, length)
        assert runtime.replayed_tokens - before == length - max(p for p in kept if p <= length)
        kept.append(length)
        if length:
            assert same(runtime.prefill(fork, PROMPT[length:], all_logits=True), whole[length:], deterministic)
        truncated = runtime.fork(base)
        runtime.truncate(truncated, length)
        assert truncated.tokens == PROMPT[:length]
        tail = torch.stack([runtime.decode([truncated], [token])[0] for token in PROMPT[length:length + 3]])
        if length:
            assert same(tail, whole[length:length + 3], deterministic), f"truncated to {length}"
        runtime.release(fork)
        runtime.release(truncated)


@pytest.mark.parametrize("deterministic", [True, False])
def test_batched_decode_of_sessions_of_different_lengths(tiny, deterministic):
    runtime = load_tiny_qwen3_5(tiny[0], deterministic=deterministic)
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    starts = [10, 61, 100]
    sessions = [runtime.new_session() for _ in starts]
    for session, start in zip(sessions, starts):
        runtime.prefill(session, PROMPT[:start])
    for step in range(5):  # the second session completes a chunk at 64
        logits = runtime.decode(sessions, [PROMPT[start + step] for start in starts])
        for row, start in enumerate(starts):
            assert same(logits[row], whole[start + step], deterministic), (start, step)


def test_export_import_round_trip_then_append(runtime, whole):
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:140])
    bounds = [0, 37, 100, 140]  # 37 and 100 are not snapshots: exporting there replays
    chunks = [runtime.export_chunk(source, a, b) for a, b in zip(bounds, bounds[1:])]
    assert len(chunks[0]) == 16 + runtime.state_bytes(37)
    target = runtime.new_session()
    with pytest.raises(ValueError):
        runtime.import_chunk(target, PROMPT[:36], chunks[0])  # the state of 37 tokens does not fit 36
    assert target.length == 0 and linear_state.held(target) is None
    for (a, b), data in zip(zip(bounds, bounds[1:]), chunks):
        runtime.import_chunk(target, PROMPT[a:b], data)
    assert states_equal(linear_state.held(target), linear_state.held(source))
    assert torch.equal(runtime.prefill(target, PROMPT[140:], all_logits=True), whole[140:])
    runtime.truncate(target, 90)  # inside an imported chunk: from the snapshot at its start (37)
    assert torch.equal(runtime.decode([target], [PROMPT[90]])[0], whole[90])
    assert "qwen3_5-hybrid/1 float32" in runtime.state_format


def test_conditional_generation_checkpoint_serves_its_language_model(tmp_path, caplog):
    model = build_tiny_qwen3_5_vl(tmp_path)
    with caplog.at_level(logging.INFO, logger="kvgate"):
        runtime = load_tiny_qwen3_5(tmp_path)
    assert "vision tower" in caplog.text
    prompt = PROMPT[:80]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([prompt])).logits[0]
    logits = runtime.prefill(runtime.new_session(), prompt, all_logits=True)
    assert torch.allclose(logits, expected, atol=TOLERANCE, rtol=0) and expected.std() > 0.1


def test_bf16_stays_close_to_fp32_and_is_exact_under_splits_cuts_and_batches(tiny, whole):
    runtime = load_tiny_qwen3_5(tiny[0], dtype="bf16")
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert logits.dtype == torch.float32 and (logits - whole).abs().max() < 0.1
    split = runtime.new_session()
    parts = [runtime.prefill(split, PROMPT[:65], all_logits=True), runtime.prefill(split, PROMPT[65:], all_logits=True)]
    assert torch.equal(torch.cat(parts), logits)
    runtime.truncate(split, 70)
    other = runtime.new_session()
    runtime.prefill(other, PROMPT[:9])
    assert torch.equal(runtime.decode([split, other], [PROMPT[70], PROMPT[9]]), logits[[70, 9]])


def test_an_interrupted_prefill_leaves_the_session_as_it_was(runtime, whole):
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:50])
    held = linear_state.held(session)
    with pytest.raises(PrefillInterrupted):
        runtime.prefill(session, PROMPT[50:], interrupted=lambda: True)
    assert session.length == 50 and linear_state.held(session) is held
    assert torch.equal(runtime.prefill(session, PROMPT[50:], all_logits=True), whole[50:])


def test_a_second_fork_at_the_same_token_replays_nothing_and_the_end_snapshot_stays(tiny, whole):
    runtime = load_tiny_qwen3_5(tiny[0], state_stride=64)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:140])
    for point in (101, 103, 105, 107, 109):  # more fork points than loose snapshots are kept
        forks, replayed = [], []
        for _ in range(2):
            before = runtime.replayed_tokens
            forks.append(runtime.fork(base, point))
            replayed.append(runtime.replayed_tokens - before)
        assert replayed[0] > 0 and replayed[1] == 0, replayed
        for fork in forks:
            assert torch.equal(runtime.prefill(fork, PROMPT[point:point + 4], all_logits=True), whole[point:point + 4])
            runtime.release(fork)
    assert sorted(linear_state.snapshots(base)) == [64, 105, 107, 109, 128, 140]  # the 3 recorded last
    assert runtime.cut_replay_tokens(base, 140) == 0


def test_a_cut_into_the_last_prefill_replays_only_from_its_start(runtime, whole):
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:100])
    runtime.prefill(session, PROMPT[100:106] + [4, 4])  # as a speculative step verifies drafts
    before = runtime.replayed_tokens
    runtime.truncate(session, 103)
    assert runtime.replayed_tokens - before == 3
    assert torch.equal(runtime.decode([session], [PROMPT[103]])[0], whole[103])


def test_a_state_stride_off_the_chunk_size_is_refused(tiny):
    runtime = load_tiny_qwen3_5(tiny[0], state_stride=100)
    with pytest.raises(ValueError, match="multiple of the chunk size 64"):
        runtime.prefill(runtime.new_session(), PROMPT)


@pytest.fixture(scope="module", params=["qwen3_5_moe_text", "qwen3_next"])
def tiny_moe(request, tmp_path_factory):
    """Qwen3.5-MoE (every layer's MLP the MoE) and Qwen3-Next (fused projections, a dense layer 1)."""
    directory = tmp_path_factory.mktemp(request.param)
    model = build_tiny_qwen3_5(directory, seed=5, model_type=request.param)
    return directory, model, reference_logits(model, PROMPT), RUNTIMES[request.param]


def close(a, b) -> bool:
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_moe_logits_decode_and_cuts_match_transformers(tiny_moe):
    runtime = load_tiny_qwen3_5(tiny_moe[0], state_stride=64)
    expected = tiny_moe[2]
    assert runtime.info.architecture == tiny_moe[3] and runtime.deterministic  # experts invariant too
    sparse = [layer.moe is not None for layer in runtime.weights.layers]
    assert sparse == ([True, False, True, True] if tiny_moe[3] == "qwen3_next" else [True] * 4)
    assert len(runtime.weights.layers[0].moe.gate_up) == 6 and runtime.weights.layers[0].gate_up is None
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert expected.std() > 0.1 and close(whole, expected)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:140])
    for length in (3, 70, 129):
        fork = runtime.fork(base, length)
        assert close(runtime.prefill(fork, PROMPT[length:], all_logits=True), expected[length:])
        steps = torch.stack([runtime.decode([fork], [token])[0] for token in [3, 4]])
        runtime.truncate(fork, length + 1)
        assert steps.shape == (2, VOCAB)
        assert close(runtime.decode([fork], [PROMPT[length + 1]])[0], expected[length + 1])
        runtime.release(fork)


def test_moe_split_prefill_batched_decode_and_export_match_transformers(tiny_moe):
    runtime, expected = load_tiny_qwen3_5(tiny_moe[0], state_stride=64), tiny_moe[2]
    for split in (1, 63, 65, 129):
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert close(torch.cat(parts), expected), f"split at {split}"
        runtime.release(session)
    starts = [10, 61, 100]
    sessions = [runtime.new_session() for _ in starts]
    for session, start in zip(sessions, starts):
        runtime.prefill(session, PROMPT[:start])
    for step in range(5):
        logits = runtime.decode(sessions, [PROMPT[start + step] for start in starts])
        assert all(close(logits[row], expected[start + step]) for row, start in enumerate(starts)), step
    bounds = [0, 37, 100, 140]
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:140])
    target = runtime.new_session()
    for a, b in zip(bounds, bounds[1:]):
        runtime.import_chunk(target, PROMPT[a:b], runtime.export_chunk(source, a, b))
    assert states_equal(linear_state.held(target), linear_state.held(source))
    assert close(runtime.prefill(target, PROMPT[140:], all_logits=True), expected[140:])
    runtime.truncate(target, 90)
    assert close(runtime.decode([target], [PROMPT[90]])[0], expected[90])


def test_qwen3_next_fused_projections_of_a_wrong_shape_are_refused():
    from kvgate.models.qwen3_5.arch import Qwen35Arch
    from kvgate.models.qwen3_5.weights import split_fused_projections
    from tests.models.tiny_qwen3_5 import text_config

    arch = Qwen35Arch.from_hf_config(text_config(model_type="qwen3_next").to_dict())
    fused = {"model.layers.0.linear_attn.in_proj_qkvz.weight": torch.zeros(128, 64),
             "model.layers.0.linear_attn.in_proj_ba.weight": torch.zeros(7, 64)}
    with pytest.raises(ValueError, match="in_proj_ba"):
        split_fused_projections(arch, fused)


def test_moe_splits_forks_and_batches_are_bit_identical_in_the_deterministic_mode(tiny_moe):
    runtime = load_tiny_qwen3_5(tiny_moe[0], state_stride=64)
    assert_splits_forks_and_batches_bit_identical(runtime, PROMPT)

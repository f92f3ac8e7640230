"""The host contract's replay and auxiliary-state figures (``ModelRuntime.cut_replay_tokens``,
``aux_state_bytes``, ``set_state_stride``) on real tiny runtimes: what a cut is announced to replay
is what the fork or truncation then runs again (Qwen3.5: the distance from the nearest snapshot;
DeepSeek V4: the raw tail it lost); a per-token K/V runtime replays nothing and holds no auxiliary
state.
"""

from __future__ import annotations

import pytest
import torch

from tests.models.tiny_deepseek_v4 import build_tiny_v4, load_tiny_v4
from tests.models.tiny_models import VOCAB, build_tiny, load_tiny
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(11)).tolist()
CHUNK = 64  # the tiny Qwen3.5's delta-rule chunk
CUTS = (1, 30, 63, 64, 65, 100, 128, 149, 150)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    directory = tmp_path_factory.mktemp("replay_qwen3_5")
    build_tiny_qwen3_5(directory)
    runtime = load_tiny_qwen3_5(directory)
    runtime.set_state_stride(CHUNK)
    return runtime


def measured_fork(runtime, session, length):
    before = runtime.replayed_tokens
    fork = runtime.fork(session, length)
    return fork, runtime.replayed_tokens - before


def test_qwen3_5_announces_what_a_fork_and_a_truncation_replay(qwen):
    session = qwen.new_session()
    qwen.prefill(session, PROMPT)  # snapshots at the stride (64, 128) and at the end (150)
    kept = [0, 64, 128, 150]  # and each fork's point once a fork replayed there
    for length in CUTS:
        announced = qwen.cut_replay_tokens(session, length)
        fork, replayed = measured_fork(qwen, session, length)
        assert announced == replayed == length - max(p for p in kept if p <= length), length
        kept.append(length)
        whole, _ = measured_fork(qwen, session, None)
        announced = qwen.cut_replay_tokens(whole, length)
        before = qwen.replayed_tokens
        qwen.truncate(whole, length)
        assert announced == qwen.replayed_tokens - before, length
        assert whole.tokens == fork.tokens
        qwen.release(fork)
        qwen.release(whole)
    qwen.release(session)


def test_qwen3_5_auxiliary_bytes_count_shared_snapshots_once(qwen):
    session = qwen.new_session()
    qwen.prefill(session, PROMPT)
    fork = qwen.fork(session, 100)  # shares the snapshot at 64
    alone, forked = qwen.aux_state_bytes([session]), qwen.aux_state_bytes([fork])
    assert alone > 0 and forked > 0
    # the session remembers the fork's point: the fork's state is that snapshot, its 64 one shared too
    assert forked < alone == qwen.aux_state_bytes([session, fork]) < alone + forked
    assert qwen.session_bytes(session) > alone  # the blocks besides
    qwen.release(fork)
    assert qwen.aux_state_bytes([fork]) == 0
    qwen.release(session)


def test_qwen3_5_state_stride_must_be_a_positive_multiple_of_the_chunk(qwen):
    for stride in (0, -64, 100):
        with pytest.raises(ValueError, match=r"cache\.state_stride: .* chunk size 64"):
            qwen.set_state_stride(stride)
    assert qwen.state_stride == CHUNK
    qwen.set_state_stride(128)
    try:
        session = qwen.new_session()
        qwen.prefill(session, PROMPT)
        assert qwen.cut_replay_tokens(session, 100) == 100  # no snapshot at 64 on a stride of 128
        assert qwen.cut_replay_tokens(session, 140) == 12
        qwen.release(session)
    finally:
        qwen.set_state_stride(CHUNK)


def test_deepseek_v4_announces_the_tail_it_replays(tmp_path):
    build_tiny_v4(tmp_path)
    runtime = load_tiny_v4(tmp_path)
    session = runtime.new_session()
    runtime.prefill(session, [t % 97 for t in PROMPT[:37]])
    announced = [runtime.cut_replay_tokens(session, length) for length in range(38)]
    measured = [measured_fork(runtime, session, length) for length in range(38)]
    assert announced == [replayed for _, replayed in measured]
    assert any(announced) and not announced[37]
    assert runtime.aux_state_bytes([session]) > 0
    for fork, _ in measured:
        runtime.release(fork)


def test_a_per_token_runtime_replays_nothing_and_holds_no_auxiliary_state(tmp_path):
    build_tiny(tmp_path, "llama_gqa_tied")
    runtime = load_tiny(tmp_path)
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:40])
    assert [runtime.cut_replay_tokens(session, n) for n in (0, 1, 17, 40)] == [0, 0, 0, 0]
    assert runtime.aux_state_bytes([session]) == 0 < runtime.session_bytes(session)
    runtime.set_state_stride(100)  # it takes no snapshots: any stride is accepted and unused
    runtime.release(session)

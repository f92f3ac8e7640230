"""Message ends marked on a tiny Qwen3.5 session (``ModelRuntime.mark_boundaries``): the prefill keeps
a recurrent-state snapshot at each, bit-identical to the state of a prefill that stops there, even
inside a delta-rule chunk and across the engine's prefill chunks; a fork there replays nothing and
goes on exactly as a cold prefill; the first message end keeps its snapshot while later loose ones
come and go. A per-token K/V runtime takes the call and changes nothing.
"""

from __future__ import annotations

import pytest
import torch

from kvgate.models.qwen3_5 import linear_state
from tests.models.tiny_models import VOCAB, build_tiny, load_tiny
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(5)).tolist()
ENDS = [37, 90, 128, 141]  # 37 and 90 inside a delta-rule chunk (64), 128 on the stride
OTHER = torch.randint(3, VOCAB, (20,), generator=torch.Generator().manual_seed(6)).tolist()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    directory = tmp_path_factory.mktemp("qwen3_5_boundaries")
    build_tiny_qwen3_5(directory)
    return load_tiny_qwen3_5(directory, state_stride=64)


def states_equal(a, b) -> bool:
    return all(torch.equal(x, y) for sa, sb in zip(a, b) for x, y in zip(sa.tensors(), sb.tensors()))


def prefilled(runtime, tokens, ends=(), pieces=(0,)):
    session = runtime.new_session()
    runtime.mark_boundaries(session, ends)
    for start, end in zip(pieces, [*pieces[1:], len(tokens)]):
        runtime.prefill(session, tokens[start:end])
    return session


def test_a_snapshot_at_each_message_end_equals_a_prefill_that_stops_there(runtime):
    session = prefilled(runtime, PROMPT, [0, *ENDS])  # position 0 is no message end
    # the first end (kept apart) and the last two (as many as the loose cap keeps beside the end)
    assert sorted(linear_state.snapshots(session)) == [37, 64, 128, 141, 150]
    for end in (37, 141):
        stopped = prefilled(runtime, PROMPT[:end])
        assert states_equal(linear_state.snapshots(session)[end], linear_state.held(stopped)), end
        runtime.release(stopped)


def test_a_fork_at_a_message_end_replays_nothing_and_goes_on_as_a_cold_prefill(runtime):
    base = prefilled(runtime, PROMPT, ENDS, pieces=(0, 50, 100))  # as the engine prefills in chunks
    assert {37, 141} <= set(linear_state.snapshots(base))
    for end in (37, 141):
        assert runtime.cut_replay_tokens(base, end) == 0
        before = runtime.replayed_tokens
        fork = runtime.fork(base, end)
        assert runtime.replayed_tokens == before
        cold = runtime.new_session()
        expected = runtime.prefill(cold, PROMPT[:end] + OTHER, all_logits=True)[end:]
        assert torch.equal(runtime.prefill(fork, OTHER, all_logits=True), expected), end
        assert torch.equal(runtime.decode([fork], [3]), runtime.decode([cold], [3]))
        runtime.release(fork)
        runtime.release(cold)
    runtime.release(base)


def test_the_first_message_end_outlives_later_loose_snapshots(runtime):
    base = prefilled(runtime, PROMPT, ENDS)
    for point in (101, 103, 105, 107, 109):  # each fork that replays leaves a loose snapshot
        runtime.release(runtime.fork(base, point))
    assert sorted(linear_state.snapshots(base)) == [37, 64, 105, 107, 109, 128, 150]
    fork = runtime.fork(base, 120)
    assert fork.aux[linear_state.FIRST_BOUNDARY] == 37  # the fork keeps it apart too
    runtime.mark_boundaries(fork, [130, 140])  # its own message ends: the last ones, not a new first
    runtime.prefill(fork, OTHER)
    assert {37, 130} <= set(linear_state.snapshots(fork)) and runtime.cut_replay_tokens(fork, 37) == 0
    runtime.release(fork)
    runtime.release(base)


def test_a_per_token_runtime_takes_message_ends_and_changes_nothing(tmp_path):
    build_tiny(tmp_path, "llama_gqa_tied")
    runtime = load_tiny(tmp_path)
    session = runtime.new_session()
    runtime.mark_boundaries(session, [3, 7])
    logits = runtime.prefill(session, PROMPT[:20])
    assert torch.equal(logits, runtime.prefill(runtime.new_session(), PROMPT[:20])) and session.aux == {}

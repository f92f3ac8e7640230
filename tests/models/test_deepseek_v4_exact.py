"""DeepSeek V4 in the deterministic mode (issue 30), on the tiny V4 model (tests/models/tiny_deepseek_v4.py)
in bf16: a row's logits are bit-identical (``torch.equal``) in a one-shot prefill, after a split at a
window boundary or inside one, decoded token by token, in a batch with sessions of other lengths and
after a fork; the MTP layer drafts the same logits whatever path built its state. Also the pieces:
:func:`exact_attend` gives :func:`attend`'s values, and top-k ties go to the lowest index.
"""

from __future__ import annotations

import pytest
import torch

from kvgate.models.deepseek_v4.arithmetic import Arithmetic
from kvgate.models.deepseek_v4.attention import attend
from kvgate.models.deepseek_v4.exact_attention import exact_attend
from tests.models.bit_identity import decoded_logits, split_prefill_logits
from tests.models.tiny_deepseek_v4 import add_mtp_layer, build_tiny_v4, load_tiny_v4

PROMPT = [(i * 37 + 11) % 97 for i in range(45)]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    written = tmp_path_factory.mktemp("deepseek_v4_exact")
    build_tiny_v4(written)
    add_mtp_layer(written)
    return written


@pytest.fixture(scope="module")
def runtime(directory):
    loaded = load_tiny_v4(directory, dtype="bf16", speculative="mtp")
    assert loaded.deterministic and loaded.invariant_arithmetic()
    return loaded


@pytest.fixture(scope="module")
def one_shot(runtime):
    return runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)


@pytest.mark.parametrize("split", [8, 13, 33])
def test_a_split_prefill_gives_the_one_shot_bits(runtime, one_shot, split):
    assert torch.equal(split_prefill_logits(runtime, PROMPT, split), one_shot)


def test_decode_alone_in_a_batch_and_after_a_fork_gives_the_one_shot_bits(runtime, one_shot):
    session, decoded = decoded_logits(runtime, PROMPT, 20, 30)
    assert torch.equal(decoded, one_shot[19:29])
    long_one, short_one = runtime.new_session(), runtime.new_session()
    runtime.prefill(long_one, PROMPT[::-1][:41])
    runtime.prefill(short_one, PROMPT[5:9])
    batch = runtime.decode([long_one, session, short_one], [5, PROMPT[30], 7])
    assert torch.equal(batch[1], one_shot[30])
    fork = runtime.fork(session, 26)
    assert torch.equal(runtime.prefill(fork, PROMPT[26:], all_logits=True), one_shot[26:])


def test_the_mtp_layer_drafts_the_same_bits_whatever_built_its_state(runtime):
    whole, parts = runtime.new_session(), runtime.new_session()
    runtime.prefill(whole, PROMPT[:40])
    runtime.prefill(parts, PROMPT[:17])
    for token in PROMPT[17:40]:
        runtime.decode([parts], [token])
    drafted = [runtime.mtp.draft_logits(session, PROMPT[40], 2) for session in (whole, parts)]
    assert len(drafted[0]) == 2 and all(torch.equal(a, b) for a, b in zip(*drafted))


def test_without_the_deterministic_mode_decode_rows_differ_so_the_tests_above_can_fail(directory):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.deepseek_v4.runtime import DEEPSEEK_V4
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    fast = load_runtime(resolve_source(str(directory)), ModelConfig(dtype="bf16"),
                        EngineConfig(block_size=4, kv_pool_tokens=4096, deterministic=False), str(directory),
                        DEEPSEEK_V4)
    one_shot, session = fast.prefill(fast.new_session(), PROMPT, all_logits=True), fast.new_session()
    first = fast.prefill(session, PROMPT[:20])
    decoded = [fast.decode([session], [token])[0] for token in PROMPT[20:30]]
    assert not torch.equal(torch.stack([first] + decoded[:-1]), one_shot[19:29])


def test_exact_attend_gives_attends_values():
    generator = torch.Generator().manual_seed(0)
    n, heads, dim, window, top_k = 6, 4, 32, 8, 3
    q, keys = torch.randn(n, heads, dim, generator=generator), torch.randn(n, window, dim, generator=generator)
    key_mask = torch.rand(n, window, generator=generator) < 0.8
    key_mask[:, -1] = True
    sinks, shared = torch.randn(heads, generator=generator), torch.randn(5, dim, generator=generator)
    shared_mask = torch.rand(n, 5, generator=generator) < 0.5
    chosen, chosen_mask = shared[torch.tensor([[4, 0]] * n)], shared_mask[:, :2]
    for entries, mask in ((None, None), (shared, shared_mask), (chosen, chosen_mask)):
        exact = exact_attend(q, keys, key_mask, entries, mask, sinks, top_k)
        assert torch.allclose(exact, attend(q, keys, key_mask, entries, mask, sinks), atol=1e-5, rtol=0)


def test_exact_top_k_breaks_ties_by_the_lowest_index():
    scores = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0]])
    assert Arithmetic(exact=True).top_k(scores, 2).tolist() == [[1, 2]]

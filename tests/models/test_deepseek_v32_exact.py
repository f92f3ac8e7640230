"""DeepSeek V3.2 in the deterministic mode (issue 30), on the tiny random ``deepseek_v32`` model of
tests/models/tiny_families.py (``index_topk`` 6, so the indexer's selection decides almost every
query) in bf16: a row's logits are bit-identical (``torch.equal``) in a one-shot prefill, after a
split, decoded token by token, in a batch with a session of another length and after a fork.
"""

from __future__ import annotations

import pytest
import torch

from tests.models.bit_identity import decoded_logits, split_prefill_logits
from tests.models.tiny_families import build_tiny_family, load_tiny_family

PROMPT = [(i * 29 + 3) % 97 for i in range(40)]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v32_exact")
    build_tiny_family(directory, "deepseek_v32")
    loaded = load_tiny_family(directory, dtype="bf16")
    assert loaded.deterministic and loaded.invariant_arithmetic() and loaded.arch.index_topk < len(PROMPT) // 4
    return loaded


@pytest.fixture(scope="module")
def one_shot(runtime):
    return runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)


@pytest.mark.parametrize("split", [3, 13, 31])
def test_a_split_prefill_gives_the_one_shot_bits(runtime, one_shot, split):
    assert torch.equal(split_prefill_logits(runtime, PROMPT, split), one_shot)


def test_decode_alone_in_a_batch_and_after_a_fork_gives_the_one_shot_bits(runtime, one_shot):
    session, decoded = decoded_logits(runtime, PROMPT, 20, 30)
    assert torch.equal(decoded, one_shot[19:29])
    other = runtime.new_session()
    runtime.prefill(other, PROMPT[::-1][:37])
    assert torch.equal(runtime.decode([other, session], [5, PROMPT[30]])[1], one_shot[30])
    fork = runtime.fork(session, 24)
    assert torch.equal(runtime.prefill(fork, PROMPT[24:], all_logits=True), one_shot[24:])

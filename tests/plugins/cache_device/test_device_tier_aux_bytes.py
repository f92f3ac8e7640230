"""The device tier's auxiliary bytes on the tiny Qwen3.5 runtime: a resident entry's recurrent-state
snapshots count (shared ones once) in its stats and against its budget, and go with the entry when
it is removed."""

from __future__ import annotations

import pytest
import torch

from kvgate.plugins.cache_device.tier import DeviceTier
from tests.models.tiny_models import VOCAB
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(5)).tolist()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    directory = tmp_path_factory.mktemp("aux_bytes_qwen3_5")
    build_tiny_qwen3_5(directory)
    runtime = load_tiny_qwen3_5(directory)
    runtime.set_state_stride(64)
    return runtime


def test_snapshots_count_against_the_budget_and_go_with_their_entry(runtime):
    tier = DeviceTier(runtime, budget_bytes=1 << 30, reserve_tokens=0, prefix_rounds=4)
    first = runtime.new_session()
    runtime.prefill(first, PROMPT)
    second = runtime.fork(first, 100)
    runtime.prefill(second, PROMPT[:20])
    (entry, _), (other, _) = tier.admit("ns", first, None), tier.admit("ns", second, None)
    held = tier.aux_bytes()
    assert held == runtime.aux_state_bytes([first, second]) > runtime.aux_state_bytes([first])
    assert tier.stats()["aux_bytes"] == held
    tier.budget_bytes = tier.resident_bytes() + held
    assert not tier.over_budget()
    tier.budget_bytes -= 1  # the blocks alone fit: the snapshots tip it over
    assert tier.over_budget()
    tier.remove(other)
    assert 0 < tier.aux_bytes() < held and other.session.aux == {}
    tier.remove(entry)
    assert tier.aux_bytes() == 0 and runtime.pool_stats()["blocks_free"] == runtime.pool_stats()["blocks_total"]

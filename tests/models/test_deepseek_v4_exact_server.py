"""Exact on DeepSeek V4 (issue 30): the tiny random V4 checkpoint of test_deepseek_v4_server.py
(sliding, CSA and HCA layers, hyper-connections, hash and learned routing), served on the defaults
(bf16, ``engine.deterministic`` on), gives one conversation the same tokens and bit-identical
logprobs cold, after a conversation it forks from, in a batch of four and restored from SSD after a
restart -- the four cases of test_moe_exact_server.py, with its helpers.
"""

from __future__ import annotations

import pytest

from tests.models.test_deepseek_v4_server import write_checkpoint
from tests.models.test_moe_exact_server import assert_bit_identical, four_ways

pytestmark = pytest.mark.slow


def test_cold_fork_batch_and_restore_are_bit_identical(tmp_path):
    assert_bit_identical(four_ways(tmp_path, "deepseek_v4", directory=write_checkpoint(tmp_path / "deepseek_v4")))

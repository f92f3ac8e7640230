"""The fence's masked copy of a logits row (what the engine samples from): equal to ``apply`` on a
fresh clone, the row it was given left alone, one kept row per fence instead of a new one a token,
and no copy at all where nothing is taken away."""

from __future__ import annotations

import torch

from kvgate.core.config import Config
from kvgate.core.fence.guards import GuardSetup
from kvgate.core.fence.request import RequestFence
from kvgate.plugins.loop_guard import GuardConfig, LoopGuard


def test_masked_equals_apply_on_a_clone_leaves_the_row_alone_and_reuses_its_row(smol_info):
    guard = LoopGuard(GuardSetup(Config(), smol_info), GuardConfig(max_token_repeats=2))
    fence = RequestFence(smol_info.vocab_size, guards=[guard])
    untouched = torch.randn(smol_info.vocab_size)
    assert fence.masked(untouched) is untouched  # nothing banned yet: the row itself
    for token in (7, 7):  # a third 7 would lengthen the run past 2: the guard bans it
        fence.advance(token)
    logits = torch.randn(smol_info.vocab_size, generator=torch.Generator().manual_seed(6))
    logits[7] = 100.0
    original, expected = logits.clone(), logits.clone()
    fence.apply(expected)
    first = fence.masked(logits)
    assert torch.equal(first, expected) and first[7] == float("-inf")
    assert torch.equal(logits, original)
    other = torch.randn(smol_info.vocab_size, generator=torch.Generator().manual_seed(7))
    second = fence.masked(other)
    assert second is first and second[7] == float("-inf")  # the kept row, overwritten
    assert torch.equal(second[8:], other[8:])
    assert fence.clone().masked(other) is not second  # a clone (a draft's) keeps a row of its own

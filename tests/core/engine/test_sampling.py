"""Sampling's greedy pick: the same token as ``torch.argmax``, without its per-token cost."""

from __future__ import annotations

import torch

from kvgate.core.engine.sampling import greedy, sample
from kvgate.core.types import SamplingParams

NAN, INF = float("nan"), float("inf")


def test_greedy_is_torch_argmax_on_ties_nan_infinities_and_views():
    generator = torch.Generator().manual_seed(5)
    rows = [torch.tensor(values) for values in ([2.0, 5.0, 5.0, 1.0], [1.0, NAN, 3.0, NAN], [-INF] * 4,
                                                [NAN] * 3, [1.0, INF, INF], [-INF, -1e30, -INF])]
    rows += [torch.randn(8, 49152, generator=generator)[3], torch.randn(49152, 4, generator=generator)[:, 1]]
    rounded = torch.randn(49152, generator=generator).bfloat16().float()  # many equal values: ties by id
    rows.append(rounded)
    for row in rows:
        assert greedy(row) == int(torch.argmax(row)), row[:8]
    assert sample(rounded.bfloat16(), SamplingParams(temperature=0.0), []) == int(torch.argmax(rounded))


"""The deterministic mode's indexer products (:mod:`kvgate.models.invariant_dots`): a score has the
same bits whatever rows and keys share its call, and the values are the plain products'."""

from __future__ import annotations

import torch

from kvgate.models.invariant_dots import invariant_dots, weighted_head_sum


def rows_and_keys(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(70, 48, generator=generator), torch.randn(600, 48, generator=generator)


def test_a_score_has_the_same_bits_with_any_rows_and_any_later_keys():
    rows, keys = rows_and_keys()
    whole = invariant_dots(rows, keys)
    for first, end, key_count in ((0, 1, 1), (5, 6, 300), (3, 20, 257), (0, 70, 256), (60, 70, 599)):
        assert torch.equal(invariant_dots(rows[first:end], keys[:key_count]), whole[first:end, :key_count])
    assert invariant_dots(rows, keys[:0]).shape == (70, 0)


def test_the_plain_product_is_not_invariant_so_the_test_above_can_fail():
    rows, keys = rows_and_keys(1)
    whole = rows @ keys.T
    assert any(not torch.equal(rows[i:i + 1] @ keys[:k].T, whole[i:i + 1, :k])
               for i in range(0, 70, 7) for k in (1, 5, 300))


def test_values_are_the_plain_products_and_the_head_sum_adds_in_order():
    rows, keys = rows_and_keys(2)
    assert torch.allclose(invariant_dots(rows, keys), rows @ keys.T, atol=1e-4, rtol=0)
    values, weights = torch.randn(5, 4, 9), torch.randn(5, 4)
    expected = ((weights[:, 0:1] * values[:, 0] + weights[:, 1:2] * values[:, 1]) + weights[:, 2:3] * values[:, 2]
                ) + weights[:, 3:4] * values[:, 3]
    assert torch.equal(weighted_head_sum(values, weights), expected)

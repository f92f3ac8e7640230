"""Namespaces and the hash chain (pure logic, no model); the prefix tree's tests are with the device
tier that owns it (tests/plugins/cache_device/test_prefix_trie.py)."""

from __future__ import annotations

import random

import pytest

from kvgate.core.cache.namespace import chunk_keys, common_prefix, namespace_for, pack_tokens, unpack_tokens

BASE = dict(runtime_fingerprint="w1", dtype="bf16", chat_template="{{ m }}", dialect_name="chatml_json",
            tokenizer_fingerprint="tok1")


@pytest.mark.parametrize("field", sorted(BASE))
def test_any_changed_input_changes_the_namespace(field):
    changed = dict(BASE, **{field: BASE[field] + "x"})
    assert namespace_for(**changed) != namespace_for(**BASE)
    assert namespace_for(**BASE) == namespace_for(**dict(BASE))


def test_fields_cannot_be_shifted_into_each_other():
    a = namespace_for("ab", "c", "", "d", "e")
    b = namespace_for("a", "bc", "", "d", "e")
    assert a != b


def test_chain_keys_share_prefixes_and_depend_on_namespace():
    tokens = list(range(100))
    keys = chunk_keys("ns", tokens, 32)
    assert len(keys) == 4
    assert chunk_keys("ns", tokens[:64] + [7] * 10, 32)[:2] == keys[:2]
    assert chunk_keys("ns", tokens[:64] + [7] * 10, 32)[2] != keys[2]
    assert not set(chunk_keys("other", tokens, 32)) & set(keys)
    assert unpack_tokens(pack_tokens(tokens + [49151, 2**32 - 1])) == tokens + [49151, 2**32 - 1]


def test_common_prefix_matches_a_plain_loop():
    rng = random.Random(3)
    for _ in range(200):
        a = [rng.randrange(3) for _ in range(rng.randrange(0, 700))]
        b = a[: rng.randrange(0, len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 300))]
        expected = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == expected

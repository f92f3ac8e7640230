"""Namespaces, the hash chain and the prefix tree (pure logic, no model)."""

from __future__ import annotations

import random

import pytest

from kvgate.core.cache.namespace import chunk_keys, common_prefix, namespace_for, pack_tokens, unpack_tokens
from kvgate.core.cache.trie import PrefixTrie

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


class Entry:
    def __init__(self, tokens):
        self.tokens, self.trie_node = tokens, None


def brute_longest(entries, tokens):
    return max((common_prefix(e.tokens, tokens) for e in entries), default=0)


def test_trie_longest_prefix_agrees_with_brute_force_under_random_inserts_and_removes():
    rng = random.Random(11)
    trie, live = PrefixTrie(), []
    for step in range(600):
        if live and rng.random() < 0.35:
            victim = live.pop(rng.randrange(len(live)))
            trie.remove(victim)
        else:
            base = rng.choice(live).tokens if live and rng.random() < 0.7 else []
            tokens = base[: rng.randrange(0, len(base) + 1)] + [rng.randrange(4) for _ in range(rng.randrange(1, 6))]
            entry = Entry(tokens)
            if trie.insert(tokens, entry) is None:
                live.append(entry)
        probe = (rng.choice(live).tokens if live else []) + [rng.randrange(4) for _ in range(3)]
        probe = probe[: rng.randrange(1, len(probe) + 1)]
        node, matched = trie.match(probe)
        assert matched == brute_longest(live, probe)
        if matched:
            found = trie.nearest_entry(node)
            assert found.tokens[:matched] == probe[:matched]
    assert trie.size == len(live) == len(list(trie.entries()))


def test_parent_descendants_and_fork_points():
    trie = PrefixTrie()
    system, a1, a2, b1 = Entry([1, 2, 3]), Entry([1, 2, 3, 4, 5]), Entry([1, 2, 3, 4, 5, 6]), Entry([1, 2, 3, 9])
    for entry in (a2, system, b1, a1):  # out of order: later shorter entries become parents
        assert trie.insert(entry.tokens, entry) is None
    assert PrefixTrie.parent_entry(a2) is a1 and PrefixTrie.parent_entry(a1) is system
    assert PrefixTrie.parent_entry(b1) is system and PrefixTrie.parent_entry(system) is None
    assert PrefixTrie.is_fork_point(system) and not PrefixTrie.is_fork_point(a1)
    assert PrefixTrie.has_descendants(a1) and not PrefixTrie.has_descendants(a2)
    assert trie.insert([1, 2, 3], Entry([1, 2, 3])) is system
    trie.remove(a1)
    assert PrefixTrie.parent_entry(a2) is system

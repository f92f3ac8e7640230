"""The prefix tree the cache tiers keep their entries in (pure logic, no model)."""

from __future__ import annotations

import random

from kvgate.core.cache.namespace import common_prefix
from kvgate.plugins.cache_device.trie import PrefixTrie


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

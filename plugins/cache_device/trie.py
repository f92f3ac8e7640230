"""A radix tree of token sequences: the prefix graph of a cache tier (one tree per namespace).

Each stored sequence (an *entry*: a resident session, an SSD snapshot) ends at a tree node; the
edges hold runs of tokens, so lookups compare tokens exactly (a hash is never taken as proof).
Every leaf holds an entry: nodes that lose their entry are pruned or merged. An entry's *parent*
is the nearest entry above it (a prefix of it); entries below it are its descendants. The tree
sets ``entry.trie_node``.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator, Optional, Sequence

from kvgate.core.cache.namespace import common_prefix


class TrieNode:
    __slots__ = ("edge", "depth", "parent", "children", "entry")

    def __init__(self, edge: list[int], depth: int, parent: Optional["TrieNode"]):
        self.edge, self.depth, self.parent = edge, depth, parent
        self.children: dict[int, TrieNode] = {}
        self.entry: Any = None


class PrefixTrie:
    def __init__(self) -> None:
        self.root = TrieNode([], 0, None)
        self.size = 0

    def match(self, tokens: Sequence[int]) -> tuple[TrieNode, int]:
        """``(node, matched)``: ``tokens[:matched]`` is the longest stored prefix; it ends on the
        edge into ``node`` or at ``node`` itself, so every entry under ``node`` holds it."""
        node, pos = self.root, 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                return node, pos
            shared = common_prefix(child.edge, tokens[pos:pos + len(child.edge)])
            pos += shared
            if shared < len(child.edge):
                return child, pos
            node = child
        return node, pos

    def longest(self, tokens: Sequence[int]) -> tuple[Any, int]:
        """``(entry, matched)``: the shortest entry holding the longest stored prefix of ``tokens``,
        or ``(None, 0)`` when nothing matches."""
        node, matched = self.match(tokens)
        return (self.nearest_entry(node), matched) if matched else (None, 0)

    def nearest_entry(self, node: TrieNode) -> Any:
        """The shortest entry at or under ``node`` (None only for an empty tree)."""
        order = itertools.count()
        heap = [(node.depth, next(order), node)]
        while heap:
            _, _, current = heapq.heappop(heap)
            if current.entry is not None:
                return current.entry
            for child in current.children.values():
                heapq.heappush(heap, (child.depth, next(order), child))
        return None

    def insert(self, tokens: Sequence[int], entry: Any) -> Any:
        """Store ``entry`` at ``tokens``; returns the entry already there instead (tree unchanged)."""
        node, pos = self.root, 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                leaf = TrieNode(list(tokens[pos:]), len(tokens), node)
                node.children[tokens[pos]] = leaf
                node, pos = leaf, len(tokens)
                break
            shared = common_prefix(child.edge, tokens[pos:pos + len(child.edge)])
            if shared < len(child.edge):
                child = self._split(child, shared)
            node, pos = child, pos + shared
        if node.entry is not None:
            return node.entry
        node.entry, entry.trie_node = entry, node
        self.size += 1
        return None

    def _split(self, child: TrieNode, at: int) -> TrieNode:
        parent = child.parent
        middle = TrieNode(child.edge[:at], parent.depth + at, parent)
        parent.children[middle.edge[0]] = middle
        child.edge = child.edge[at:]
        child.parent = middle
        middle.children[child.edge[0]] = child
        return middle

    def remove(self, entry: Any) -> None:
        node = entry.trie_node
        if node is None or node.entry is not entry:
            raise KeyError("entry is not in this tree")
        node.entry, entry.trie_node = None, None
        self.size -= 1
        self._prune(node)

    def _prune(self, node: TrieNode) -> None:
        while node.parent is not None and node.entry is None:
            parent = node.parent
            if not node.children:
                del parent.children[node.edge[0]]
                node = parent
                continue
            if len(node.children) == 1:
                (child,) = node.children.values()
                child.edge = node.edge + child.edge
                child.parent = parent
                parent.children[child.edge[0]] = child
            return

    @staticmethod
    def parent_entry(entry: Any) -> Any:
        node = entry.trie_node.parent
        while node is not None and node.entry is None:
            node = node.parent
        return node.entry if node is not None else None

    @staticmethod
    def has_descendants(entry: Any) -> bool:
        return bool(entry.trie_node.children)

    @staticmethod
    def is_fork_point(entry: Any) -> bool:
        """True when sequences branch right here (e.g. a system prompt shared by sessions)."""
        return len(entry.trie_node.children) > 1

    def entries(self) -> Iterator[Any]:
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.entry is not None:
                yield node.entry
            stack.extend(node.children.values())

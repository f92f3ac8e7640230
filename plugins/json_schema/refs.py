"""Recursive ``$ref``s unrolled to a bounded depth, so a grammar never recurses.

A recursive schema (``{"$ref": "#"}``, an a <-> b cycle, a ``$defs`` entry that refers to itself)
can force an endless prefix (a required property that recurses has no finite instance) and then
fails inside the grammar engine at generation time. Every reference target that takes part in a
cycle is copied once per level into ``$defs``; a reference at the last level becomes ``{}`` (any
value). The result admits a superset of the original, and only structures nested deeper than
``depth`` levels differ. Non-recursive references are left as they are.

Cycles are found as strongly connected components of the reference graph (linear time), and the
unrolled copy is held to the schema size limit, so a hostile web of references costs little.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional
from urllib.parse import unquote

from kvgate.core.fence.errors import FenceRequestError
from kvgate.plugins.json_schema.limits import MAX_SCHEMA_NODES, SchemaTooLarge

DEF_KEYS = ("$defs", "definitions")


def pointer_of(ref: Any) -> Optional[str]:
    """The JSON pointer of a local reference (``#`` or ``#/...``), else None."""
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        return unquote(ref[1:])
    return None


def resolve(root: Any, pointer: str, where: str) -> Any:
    node = root
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise FenceRequestError(f"{where}: $ref '#{pointer}' does not resolve", param="tools")
    return node


def refs_in(node: Any) -> Iterator[str]:
    """Pointers of the local references inside ``node``, not descending into definitions."""
    if isinstance(node, dict):
        pointer = pointer_of(node.get("$ref"))
        if pointer is not None:
            yield pointer
        for key, value in node.items():
            if key not in DEF_KEYS and key not in ("enum", "const"):
                yield from refs_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs_in(item)


def reference_graph(root: Any, where: str) -> dict[str, list[str]]:
    """For every pointer reachable from the root (``""``): the pointers its target refers to."""
    edges: dict[str, list[str]] = {}
    todo = [""]
    while todo:
        pointer = todo.pop()
        if pointer in edges:
            continue
        edges[pointer] = list(dict.fromkeys(refs_in(resolve(root, pointer, where))))
        todo.extend(edges[pointer])
    return edges


def cycle_groups(edges: dict[str, list[str]]) -> dict[str, int]:
    """pointer -> its strongly connected component, for the pointers that take part in a cycle.

    Tarjan's algorithm, iterative (a chain of thousands of references must not hit the recursion
    limit): linear in pointers and references.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: dict[str, int] = {}
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                _close_component(node, stack, on_stack, edges, groups)
    return groups


def _close_component(head: str, stack: list[str], on_stack: set[str], edges: dict[str, list[str]],
                     groups: dict[str, int]) -> None:
    """Pop ``head``'s component off the stack; record it when it is a cycle (two or more members,
    or one that refers to itself)."""
    members = []
    while True:
        member = stack.pop()
        on_stack.discard(member)
        members.append(member)
        if member == head:
            break
    if len(members) > 1 or head in edges[head]:
        group = len(groups)
        for member in members:
            groups[member] = group


def bound_recursion(schema: Any, depth: int, where: str, param: str = "tools") -> tuple[Any, bool]:
    """(schema with recursion unrolled ``depth`` levels deep, whether anything was recursive)."""
    if not isinstance(schema, dict) or "$ref" not in repr(schema):
        return schema, False
    groups = cycle_groups(reference_graph(schema, where))
    if not groups:
        return schema, False
    writer = _Unroller(schema, groups, depth, where, param)
    out = writer.copy(schema, "", 0)
    out.pop("$defs", None)
    out.pop("definitions", None)
    out["$defs"] = writer.defs
    return out, True


class _Unroller:
    def __init__(self, root, groups, depth, where, param):
        self.root, self.groups, self.depth, self.where, self.param = root, groups, depth, where, param
        self.names: dict[tuple[str, int], str] = {}
        self.defs: dict[str, Any] = {}
        self.nodes = 0  # nodes written, held to MAX_SCHEMA_NODES

    def same_cycle(self, a: str, b: str) -> bool:
        group = self.groups.get(a)
        return group is not None and group == self.groups.get(b)

    def copy(self, node: Any, owner: str, level: int) -> Any:
        """``node`` (inside the target ``owner`` at ``level``) with references renamed."""
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise SchemaTooLarge(self.where, f"unrolled recursion of more than {MAX_SCHEMA_NODES} nodes "
                                 f"(the limit of an unrolled schema)", self.param)
        if isinstance(node, list):
            return [self.copy(item, owner, level) for item in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key in DEF_KEYS:
                continue
            if key == "$ref" and pointer_of(value) is not None:
                target = self.target(pointer_of(value), owner, level)
                if target is not None:
                    out["$ref"] = target
                continue
            out[key] = value if key in ("enum", "const") else self.copy(value, owner, level)
        return out

    def target(self, pointer: str, owner: str, level: int) -> Optional[str]:
        """The ``$defs`` reference for ``pointer`` seen from ``owner``; None past the depth."""
        level = level + 1 if self.same_cycle(pointer, owner) else 0
        if level >= self.depth:
            return None
        key = (pointer, level)
        if key not in self.names:
            name = f"kvgate_{len(self.names)}"
            self.names[key] = name
            self.defs[name] = self.copy(resolve(self.root, pointer, self.where), pointer, level)
        return f"#/$defs/{self.names[key]}"

"""Recursive ``$ref``s unrolled to a bounded depth, so a grammar never recurses.

A recursive schema (``{"$ref": "#"}``, an a <-> b cycle, a ``$defs`` entry that refers to itself)
can force an endless prefix (a required property that recurses has no finite instance) and then
fails inside the grammar engine at generation time. Every reference target that takes part in a
cycle is copied once per level into ``$defs``; a reference at the last level becomes ``{}`` (any
value). The result admits a superset of the original, and only structures nested deeper than
``depth`` levels differ. Non-recursive references are left as they are.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional
from urllib.parse import unquote

from kvgate.core.fence.errors import FenceRequestError

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


def reach(root: Any, where: str) -> dict[str, set[str]]:
    """For every pointer reachable from the root: the pointers reachable from it."""
    edges: dict[str, set[str]] = {}
    todo = [""] + list(refs_in(root))
    while todo:
        pointer = todo.pop()
        if pointer in edges:
            continue
        edges[pointer] = set(refs_in(resolve(root, pointer, where)))
        todo.extend(edges[pointer])
    closure = {p: set(targets) for p, targets in edges.items()}
    for _ in range(len(closure)):
        grown = False
        for targets in closure.values():
            extra = set().union(*(closure[t] for t in targets)) - targets
            if extra:
                targets |= extra
                grown = True
        if not grown:
            break
    return closure


def bound_recursion(schema: Any, depth: int, where: str) -> tuple[Any, bool]:
    """(schema with recursion unrolled ``depth`` levels deep, whether anything was recursive)."""
    if not isinstance(schema, dict) or "$ref" not in repr(schema):
        return schema, False
    closure = reach(schema, where)
    cyclic = {p for p, targets in closure.items() if p in targets}
    if not cyclic:
        return schema, False
    writer = _Unroller(schema, closure, cyclic, depth, where)
    out = writer.copy(schema, "", 0)
    out.pop("$defs", None)
    out.pop("definitions", None)
    out["$defs"] = writer.defs
    return out, True


class _Unroller:
    def __init__(self, root, closure, cyclic, depth, where):
        self.root, self.closure, self.cyclic, self.depth, self.where = root, closure, cyclic, depth, where
        self.names: dict[tuple[str, int], str] = {}
        self.defs: dict[str, Any] = {}

    def same_cycle(self, a: str, b: str) -> bool:
        return a in self.closure.get(b, ()) and b in self.closure.get(a, ())

    def copy(self, node: Any, owner: str, level: int) -> Any:
        """``node`` (inside the target ``owner`` at ``level``) with references renamed."""
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
        level = level + 1 if pointer in self.cyclic and self.same_cycle(pointer, owner) else 0
        if level >= self.depth:
            return None
        key = (pointer, level)
        if key not in self.names:
            name = f"kvgate_{len(self.names)}"
            self.names[key] = name
            self.defs[name] = self.copy(resolve(self.root, pointer, self.where), pointer, level)
        return f"#/$defs/{self.names[key]}"

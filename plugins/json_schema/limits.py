"""Cheap limits that refuse an absurd schema before any costly work on it.

Every later step (the meta-schema check, normalising, unrolling recursion, compiling the grammar)
costs at least in proportion to the schema's size, some of it in pure Python, so a schema past
these limits gets a 400 naming the limit, at once. Real agents' tool schemas are tens of nodes
deep in the low tens; the limits sit orders of magnitude above them.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.fence.errors import FenceRequestError

MAX_SCHEMA_NODES = 50_000  # objects, arrays and values, counted once each (also the unrolled copy)
MAX_SCHEMA_DEPTH = 64  # nesting of objects and arrays
MAX_SCHEMA_REFS = 1_000  # "$ref" keywords


class SchemaTooLarge(FenceRequestError):
    """A schema past one of the limits; the message names the limit."""

    def __init__(self, where: str, what: str, param: str = "tools"):
        super().__init__(f"{where}: the JSON Schema is too large: {what}; simplify it", param=param)


def check_limits(schema: Any, where: str, param: str) -> None:
    """Raise :class:`SchemaTooLarge` when ``schema`` passes a limit; one walk, no recursion."""
    nodes = refs = 0
    todo = [(schema, 1)]
    while todo:
        node, depth = todo.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise SchemaTooLarge(where, f"more than {MAX_SCHEMA_NODES} nodes", param)
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaTooLarge(where, f"nested more than {MAX_SCHEMA_DEPTH} levels deep", param)
        if isinstance(node, dict):
            if "$ref" in node:
                refs += 1
                if refs > MAX_SCHEMA_REFS:
                    raise SchemaTooLarge(where, f"more than {MAX_SCHEMA_REFS} $ref keywords", param)
            todo.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            todo.extend((item, depth + 1) for item in node)


def check_request_limits(request) -> None:
    """:func:`check_limits` on every schema a request carries (its tools', its response format's)."""
    for tool in request.tools:
        check_limits(tool.parameters, f"tool {tool.name!r}", "tools")
    fmt = request.response_format
    if fmt.type == "json_schema":
        check_limits(fmt.schema, "response_format", "response_format")

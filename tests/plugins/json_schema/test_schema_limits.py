"""Bounded work for hostile schemas (issue 31, finding 1): size limits refuse an absurd schema at
once with a 400 naming the limit, reference cycles are found in linear time, and an unrolled copy
is held to the size limit. (The cancelled over-budget build: tests/core/fence/test_fence_admission.py.)"""

from __future__ import annotations

import time

import pytest

from kvgate.core.fence.errors import FenceRequestError
from kvgate.plugins.json_schema.limits import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, MAX_SCHEMA_REFS, check_limits
from kvgate.plugins.json_schema.refs import bound_recursion, cycle_groups, reference_graph


def ref_cycle(definitions: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/d{(i + 1) % definitions}"}}}
            for i in range(definitions)}
    return {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}


class Opened(dict):
    """A schema object that counts, in ``log``, each time a walk lists its values."""

    def __init__(self, items, log: list):
        super().__init__(items)
        self.log = log

    def values(self):
        self.log.append(1)
        return super().values()


def counted(schema, log: list):
    """``schema`` with every object an :class:`Opened` writing to ``log``."""
    if isinstance(schema, dict):
        return Opened({key: counted(value, log) for key, value in schema.items()}, log)
    if isinstance(schema, list):
        return [counted(item, log) for item in schema]
    return schema


def deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize("schema, limit", [
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10 * MAX_SCHEMA_NODES)}}, "nodes"),
    ({"anyOf": [deep(4 * MAX_SCHEMA_DEPTH) for _ in range(200)]}, "levels deep"),
    ({"type": "object", "properties": {f"p{i}": {"$ref": "#"} for i in range(10 * MAX_SCHEMA_REFS)}}, "$ref"),
])
def test_a_schema_past_a_limit_is_refused_at_once_naming_it(schema, limit):
    opened: list = []
    with pytest.raises(FenceRequestError) as info:
        check_limits(counted(schema, opened), "response_format", "response_format")
    assert len(opened) <= MAX_SCHEMA_NODES  # the walk stops at the limit, not at the schema's end
    assert limit in info.value.message and "too large" in info.value.message
    assert info.value.param == "response_format" and info.value.status == 400


def test_a_schema_within_the_limits_passes():
    check_limits(ref_cycle(MAX_SCHEMA_REFS - 1), "tool 'f'", "tools")
    check_limits(deep(MAX_SCHEMA_DEPTH - 2), "tool 'f'", "tools")


def test_a_long_reference_cycle_is_found_and_unrolled_in_linear_time():
    schema = ref_cycle(20_000)  # before: O(n^3), about 8 minutes at 1,500
    started = time.monotonic()
    groups = cycle_groups(reference_graph(schema, "x"))
    out, recursive = bound_recursion(schema, 5, "x")
    took = time.monotonic() - started
    assert len(groups) == 20_000 and len(set(groups.values())) == 1
    assert recursive and len(out["$defs"]) == 5 and took < 5.0, took


def test_cycles_are_told_apart_from_shared_references():
    schema = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}, "c": {"$ref": "#/$defs/c"},
                        "leaf": {"type": "string"}},
              "anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/c"}, {"$ref": "#/$defs/leaf"},
                        {"$ref": "#/$defs/leaf"}]}
    groups = cycle_groups(reference_graph(schema, "x"))
    assert set(groups) == {"/$defs/a", "/$defs/b", "/$defs/c"}
    assert groups["/$defs/a"] == groups["/$defs/b"] != groups["/$defs/c"]


def test_an_unrolled_copy_past_the_size_limit_is_refused():
    count = 120  # each definition refers to every other: the unrolled copy grows as count^2 * depth
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{j}"} for j in range(count)]} for i in range(count)}
    with pytest.raises(FenceRequestError, match="unrolled recursion of more than"):
        bound_recursion({"$ref": "#/$defs/d0", "$defs": defs}, 5, "tool 'f'", "tools")

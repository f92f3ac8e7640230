"""Bounded work for hostile schemas (issue 31, finding 1): size limits refuse an absurd schema at
once with a 400 naming the limit, reference cycles are found in linear time, an unrolled copy is
held to the size limit, and an over-budget build is cancelled so that its worker is free again."""

from __future__ import annotations

import asyncio
import time

import pytest

from kvgate.core.fence.admission import FenceAdmission
from kvgate.core.fence.cancel import checkpoint
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.fence.schema_limits import MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, MAX_SCHEMA_REFS, check_limits
from kvgate.core.fence.schema_refs import bound_recursion, cycle_groups, reference_graph
from kvgate.core.types import ChatRequest, Message, ResponseFormat


def ref_cycle(definitions: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/d{(i + 1) % definitions}"}}}
            for i in range(definitions)}
    return {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize("schema, limit", [
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_SCHEMA_NODES)}}, "nodes"),
    (deep(MAX_SCHEMA_DEPTH), "levels deep"),
    ({"type": "object", "properties": {f"p{i}": {"$ref": "#"} for i in range(MAX_SCHEMA_REFS + 1)}}, "$ref"),
])
def test_a_schema_past_a_limit_is_refused_at_once_naming_it(schema, limit):
    started = time.monotonic()
    with pytest.raises(FenceRequestError) as info:
        check_limits(schema, "response_format", "response_format")
    assert time.monotonic() - started < 0.5
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


def test_an_over_budget_build_is_cancelled_and_frees_its_worker():
    """The build here is a stand-in that only spins through checkpoints (a real costly build
    takes machine-dependent time): the cancellation path it exercises is the real one."""
    finished: list[str] = []

    def build(request):
        if request.messages[0].content == "costly":
            while True:
                checkpoint()
                time.sleep(0.01)
        finished.append(request.messages[0].content)
        return "fence"

    def constrained(text: str) -> ChatRequest:
        return ChatRequest(model="m", messages=[Message("user", text)],
                           response_format=ResponseFormat("json_object"))

    admission = FenceAdmission(build, budget_s=0.3, workers=1)

    async def scenario():
        with pytest.raises(FenceRequestError, match="did not compile within"):
            await admission.admit(constrained("costly"))
        return await asyncio.wait_for(admission.admit(constrained("light")), 2.0)

    try:
        assert asyncio.run(scenario()) == "fence" and finished == ["light"]  # the one worker was free again
    finally:
        admission.close()

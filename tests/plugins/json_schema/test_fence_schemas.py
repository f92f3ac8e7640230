"""Client schemas served end to end: normalised, relaxed (and reported), recursion bounded, and a
short 400 for what is not JSON Schema (the real agents' tool lists: tests/core/fence/test_fence_schemas.py)."""

from __future__ import annotations

import time

import pytest
import torch

from kvgate.core.fence import FenceRequestError, build_request_fence
from kvgate.core.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice

from tests.core.fence.conftest import greedy_run

RECURSIVE = {
    "hash": {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]},
    "cycle": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    "self": {"type": "object", "properties": {"n": {"$ref": "#/$defs/node"}}, "required": ["n"],
             "$defs": {"node": {"type": "object", "properties": {"n": {"$ref": "#/$defs/node"}}, "required": ["n"]}}},
}


def forced(tool: Tool, response=None) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=[tool],
                       tool_choice=ToolChoice("named", tool.name), response_format=response or ResponseFormat())


@pytest.fixture(scope="module")
def chatml(pm):
    from kvgate.core.plugins import collect

    return collect(pm, "register_dialects", "dialect").get("chatml_json")()


def fence_for(req, chatml, smol_info, config, pm):
    return build_request_fence(req, chatml, smol_info, config, pm)


def test_no_op_keywords_vanish_without_a_note(chatml, smol_info, config, pm):
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "title": "t",
              "properties": {"metadata": {"type": "object", "propertyNames": {"type": "string"},
                                          "additionalProperties": {}, "examples": [{}]}}}
    fence = fence_for(forced(Tool("TaskCreate", "", schema)), chatml, smol_info, config, pm)
    assert fence.relaxed == []


def test_unenforceable_keywords_are_relaxed_and_listed(chatml, smol_info, config, pm):
    schema = {"type": "object", "properties": {"a": {"not": {"type": "string"}},
                                               "b": {"type": "string", "pattern": "^(?=x)x$"},
                                               "c": {"type": "array", "uniqueItems": True}}}
    fence = fence_for(forced(Tool("f", "", schema)), chatml, smol_info, config, pm)
    text = " | ".join(fence.relaxed)
    assert "tool 'f': not at /properties/a" in text and "pattern at /properties/b" in text
    assert "uniqueItems at /properties/c" in text


@pytest.mark.parametrize("schema,keyword", [({"type": "object", "properties": {"a": {"type": "strin"}}}, "type"),
                                            ({"type": "object", "required": "a"}, "required"),
                                            ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}, "$ref")])
def test_invalid_schema_is_a_short_error_naming_tool_and_keyword(chatml, smol_info, config, pm, schema, keyword):
    with pytest.raises(FenceRequestError) as info:
        fence_for(forced(Tool("bad_tool", "", schema)), chatml, smol_info, config, pm)
    message = str(info.value.message if hasattr(info.value, "message") else info.value)
    assert "bad_tool" in message and keyword in message and len(message) < 300


@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_ref_is_bounded_and_generates(chatml, smol_info, config, pm, name):
    for req in (forced(Tool("f", "", RECURSIVE[name])),
                ChatRequest(model="m", messages=[Message("user", "hi")],
                            response_format=ResponseFormat("json_schema", RECURSIVE[name]))):
        fence = fence_for(req, chatml, smol_info, config, pm)
        assert any("recursive $ref unrolled" in note for note in fence.relaxed)
        out = greedy_run(fence, lambda o: torch.zeros(smol_info.vocab_size), 120)  # no FenceError on the way
        assert out and fence.matcher.is_accepting()


def test_long_pattern_is_relaxed_quickly(chatml, smol_info, config, pm):
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": ".{0,10}" * 1700}}}
    started = time.monotonic()
    fence = fence_for(forced(Tool("f", "", schema)), chatml, smol_info, config, pm)
    assert time.monotonic() - started < config.fence.compile_budget_s
    assert any("pattern at /properties/p of 11900 characters" in note for note in fence.relaxed)


def test_refs_compile_in_a_dialect_that_writes_each_parameter_alone(smol_info, config, pm):
    from kvgate.core.plugins import collect

    glm = collect(pm, "register_dialects", "dialect").get("glm_xml")()
    schema = {"type": "object", "properties": {"a": {"$ref": "#/definitions/x"}, "b": {"$ref": "#/$defs/b"}},
              "definitions": {"x": {"type": "integer"}},
              "$defs": {"b": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/b"}}}}}}
    fence = build_request_fence(forced(Tool("f", "", schema)), glm, smol_info, config, pm)
    assert fence is not None and any("recursive" in note for note in fence.relaxed)

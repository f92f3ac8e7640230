"""Valid schemas with extreme numbers (issue 31, finding 11): the numeric keyword the grammar
engine cannot express is dropped and noted, the rest of the schema -- ``required`` above all -- is
still enforced; a schema that cannot be enforced even so is a 400, never a bare-type fallback."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from kvgate.core.fence.errors import FenceRequestError
from kvgate.plugins.json_schema.numbers import drop_unenforceable_numbers
from kvgate.plugins.json_schema.prepare import JsonSchemaPreparer
from kvgate.plugins.grammar_llguidance.backend import LlgBackend
from tests.harness import ServerProcess

EXTREMES = [  # (property schema, the keyword the engine cannot express)
    ({"type": "string", "maxLength": 10**18}, "maxLength"),
    ({"type": "number", "multipleOf": 1e-300}, "multipleOf"),
    ({"type": "number", "minimum": 1e308}, "minimum"),
    ({"type": "integer", "exclusiveMinimum": 1e300, "maximum": 7}, "exclusiveMinimum"),
    ({"type": "number", "minimum": 0.5, "maximum": 1e20}, "maximum"),
    ({"type": "number", "minimum": float("inf")}, "minimum"),  # what a body's 1e400 parses to
]


def with_property(extreme: dict) -> dict:
    return {"type": "object", "properties": {"odd": extreme, "name": {"type": "string", "enum": ["ann", "bo"]},
                                             "count": {"type": "integer", "minimum": 2, "maximum": 9}},
            "required": ["odd", "name", "count"], "additionalProperties": False}


def without(schema: dict, keyword: str) -> dict:
    odd = {key: value for key, value in schema["properties"]["odd"].items() if key != keyword}
    return {**schema, "properties": {**schema["properties"], "odd": odd}}


@pytest.fixture(scope="module")
def preparer(smol_info):
    return JsonSchemaPreparer(LlgBackend(smol_info))


@pytest.mark.parametrize("extreme, keyword", EXTREMES)
def test_only_the_keyword_the_engine_cannot_express_is_dropped(preparer, extreme, keyword):
    schema = with_property(extreme)
    prepared = preparer.prepare(schema, "tool 'f'", "tools")
    assert prepared.schema == without(schema, keyword)
    assert [note.split()[0] for note in prepared.relaxed] == [keyword]


def test_every_failing_keyword_of_a_node_goes_and_the_rest_stay():
    refused = {"maxLength", "minimum"}

    def probe(schema):
        return "too big" if refused & set(schema) else ""

    notes: list[str] = []
    schema = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 2, "maxLength": 10**18}}
    out = drop_unenforceable_numbers(schema, probe, notes)
    assert out == {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 2}}
    assert len(notes) == 1 and notes[0].startswith("maxLength") and "/items" in notes[0]


def test_a_schema_that_still_cannot_compile_is_refused_not_reduced(smol_info):
    class NothingCompiles(LlgBackend):
        def schema_error(self, schema) -> str:
            return "cannot compile"

    with pytest.raises(FenceRequestError) as refused:
        JsonSchemaPreparer(NothingCompiles(smol_info)).prepare(with_property({"type": "string"}), "tool 'f'", "tools")
    assert refused.value.status == 400 and "cannot enforce" in refused.value.message


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("extreme-numbers"), {"cache": {"ssd_enabled": False}}) as running:
        yield running


@pytest.mark.slow
@pytest.mark.parametrize("extreme, keyword", EXTREMES[:3:2])
def test_a_required_call_has_every_required_key_and_validates(server, extreme, keyword):
    schema = with_property(extreme)
    tools = [{"type": "function", "function": {"name": "record", "parameters": schema}}]
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Record someone."}], "tools": tools,
            "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 60, "temperature": 0}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    [call] = reply.json()["choices"][0]["message"]["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])
    assert set(arguments) == {"odd", "name", "count"}
    jsonschema.validate(arguments, without(schema, keyword))

"""schemathesis against the server's own OpenAPI document, over real HTTP to a real server.

Every JSON POST route publishes its request-body schema and its answers
(:mod:`kvgate.core.http.openapi`), so schemathesis builds real bodies from them: valid ones
(positive) and ones that break the schema (negative), a fixed number per route, derandomized.
Each answer must not be a 5xx, and a POST route's answer must have a documented status, a
documented content type and a body that matches its documented schema. The GET routes under
``/v1`` are fuzzed too (their path parameters), checked for 5xx only. ``[model]
max_output_tokens`` keeps every generation to two tokens, a 256-token context keeps prompts short,
and one torch thread keeps a prefill fast on a machine whose cores are busy with other work.
"""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)
from schemathesis.generation import GenerationMode

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

KEY = "schemathesis-key"
HEADERS = {"authorization": f"Bearer {KEY}"}
EXAMPLES = {("post", "positive"): 6, ("post", "negative"): 8}  # per operation; GET and DELETE: 3
POST_CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
COUNTS: Counter = Counter()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings_ = {"model": {"max_context": 256, "max_output_tokens": 2, "threads": 1},
                 "engine": {"default_max_tokens": 2}, "server": {"api_key": KEY}, "responses": {}}
    with ServerProcess(tmp_path_factory.mktemp("schemathesis"), settings=settings_) as proc:
        yield proc


@pytest.fixture(scope="module")
def schema(server):
    document = httpx.get(server.base_url + "/schema/openapi.json", headers=HEADERS).json()
    return schemathesis.openapi.from_dict(document)


def operations(schema, method: str) -> list:
    found = [result.ok() for result in schema.get_all_operations()]
    return [op for op in found if op.method == method and op.path.startswith("/v1/")]


def fuzz(operation, mode: GenerationMode, base_url: str) -> None:
    checks = POST_CHECKS if operation.method == "post" else [not_a_server_error]

    @settings(max_examples=EXAMPLES.get((operation.method, mode.value), 3), derandomize=True, database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(operation.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call(base_url=base_url, headers=HEADERS, timeout=120)
        COUNTS[(operation.method, mode.value, response.status_code // 100)] += 1
        case.validate_response(response, checks=checks, headers=HEADERS)

    run()


def test_every_json_post_route_publishes_a_request_schema(schema):
    posts = operations(schema, "post")
    assert len(posts) == 8, [op.path for op in posts]
    for op in posts:
        body = op.definition.raw["requestBody"]["content"]["application/json"]["schema"]
        assert body["type"] == "object" and body["properties"], op.path


@pytest.mark.parametrize("method, mode", [("post", GenerationMode.POSITIVE), ("post", GenerationMode.NEGATIVE),
                                          ("get", GenerationMode.POSITIVE), ("delete", GenerationMode.POSITIVE)],
                         ids=["post-positive", "post-negative", "get", "delete"])  # a path parameter is any string
def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(server, schema, method, mode):
    for operation in operations(schema, method):
        fuzz(operation, mode, server.base_url)


UNHASHABLE = [[], {}, ["user"], {"a": 1}]  # a JSON array or object where a name is looked up
UNHASHABLE_BODIES = [  # the first schemathesis run found the first: a 500 for a dict as a part's type
    ("/v1/responses", lambda bad: {"input": [{"type": "function_call_output", "call_id": "c",
                                              "output": [{"type": bad}]}]}),
    ("/v1/responses", lambda bad: {"input": [{"role": "user", "content": [{"type": bad, "text": "x"}]}]}),
    ("/v1/responses/input_tokens", lambda bad: {"input": [{"role": bad, "content": "x"}]}),
    ("/v1/messages", lambda bad: {"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": bad}}),
    ("/v1/messages/count_tokens", lambda bad: {"messages": [{"role": bad, "content": "x"}]}),
    ("/v1/chat/completions", lambda bad: {"messages": [{"role": "user", "content": [{"type": bad}]}]}),
    ("/v1/chat/completions", lambda bad: {"messages": [{"role": bad}], "tool_choice": {"type": bad}}),
]


@pytest.mark.parametrize("path, make", UNHASHABLE_BODIES,
                         ids=[f"{path}-{index}" for index, (path, _) in enumerate(UNHASHABLE_BODIES)])
def test_an_array_or_object_where_a_name_is_looked_up_is_a_400(server, path, make):
    for bad in UNHASHABLE:
        response = httpx.post(server.base_url + path, json=make(bad), headers=HEADERS, timeout=60)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"], error


def test_the_fuzzing_reached_generation_and_the_server_still_serves(server):
    print(f"\nschemathesis answers (method, mode, status class): {dict(sorted(COUNTS.items()))}")
    assert not any(count for (_, _, kind), count in COUNTS.items() if kind == 5)
    assert COUNTS[("post", "positive", 2)] >= 10  # valid bodies get answered, not only refused
    assert COUNTS[("post", "negative", 4)] >= 50  # invalid bodies get refused
    assert httpx.get(server.base_url + "/health").json()["status"] == "ok"

"""A grammar that compiles but cannot take its first step (issue 31, finding 7): a ``pattern`` of
``^z{1000000}$`` exhausts llguidance's lexer once its forced tokens are computed. Every try, not
only the first, is a 400 (gRPC: INVALID_ARGUMENT) with a one-line message -- no grammar dump."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb

from tests.adapters.grpc_client import generate_request, scheduler
from tests.harness import ServerProcess, free_port

pytestmark = pytest.mark.slow
SCHEMA = {"type": "object", "properties": {"z": {"type": "string", "pattern": "^z{1000000}$"}}, "required": ["z"]}
HI = [{"role": "user", "content": "hi"}]
BODIES = {
    "/v1/chat/completions": {"messages": HI, "max_tokens": 4,
                             "response_format": {"type": "json_schema", "json_schema": {"name": "z", "schema": SCHEMA}}},
    "/v1/messages": {"messages": HI, "max_tokens": 4, "tools": [{"name": "z", "input_schema": SCHEMA}],
                     "tool_choice": {"type": "any"}},
    "/v1/responses": {"input": "hi", "max_output_tokens": 4,
                      "text": {"format": {"type": "json_schema", "name": "z", "schema": SCHEMA}}},
}
TRIES = 3


def assert_short(message: str) -> None:
    assert "cannot be compiled" in message and "too many expressions" in message, message
    assert len(message) < 400 and "\n" not in message and "%json" not in message and "<state>" not in message


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"cache": {"ssd_enabled": False}, "grpc": {"enabled": True, "port": free_port()},
                "fence": {"compile_budget_s": 120}}  # the build finishes even on a loaded machine
    with ServerProcess(tmp_path_factory.mktemp("first-steps"), settings) as running:
        yield running, settings["grpc"]["port"]


@pytest.mark.parametrize("path", BODIES)
def test_every_try_is_a_short_400(server, path):
    running, _ = server
    for _ in range(TRIES):
        reply = httpx.post(running.base_url + path, json=BODIES[path], timeout=300)
        assert reply.status_code == 400, reply.text
        assert_short(reply.json()["error"]["message"])


def test_every_grpc_try_is_a_short_invalid_argument(server, smollm2_tokenizer):
    running, port = server
    channel, stub = scheduler(port)
    ids = smollm2_tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n").ids
    try:
        for attempt in range(TRIES):
            request = generate_request(ids, request_id=f"z{attempt}", max_new_tokens=4, json_schema=json.dumps(SCHEMA))
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Generate(request))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
            assert_short(caught.value.details())
        assert stub.HealthCheck(pb.HealthCheckRequest()).healthy
    finally:
        channel.close()

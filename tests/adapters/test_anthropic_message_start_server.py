"""``message_start`` after the cache lookup, on a real server (embedded SmolLM2): its usage is the
final usage's input side (Claude Code's check), cache reads included, over raw SSE and through the
official SDK's streaming helper."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

INPUT_SIDE = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
SYSTEM = "You are a careful assistant who answers questions about cats. " * 30  # several cache blocks


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": 2048, "aliases": ["claude-*"]}}  # default cached-token rounding
    with ServerProcess(tmp_path_factory.mktemp("message-start"), settings=settings) as proc:
        yield proc


def body(question: str) -> dict:
    return {"model": "claude-haiku-4-5", "max_tokens": 4, "stream": True, "system": SYSTEM,
            "messages": [{"role": "user", "content": question}]}


def start_and_final_usage(server, request: dict) -> tuple[dict, dict]:
    with httpx.stream("POST", server.base_url + "/v1/messages", json=request, timeout=120) as response:
        assert response.status_code == 200
        frames = "".join(response.iter_text()).strip().split("\n\n")
    events = {frame.split("\n")[0][7:]: json.loads(frame.split("\n")[1][6:]) for frame in frames}
    return events["message_start"]["message"]["usage"], events["message_delta"]["usage"]


def input_side(usage) -> dict:
    usage = usage if isinstance(usage, dict) else usage.model_dump()
    return {key: usage[key] for key in INPUT_SIDE}


def test_a_cache_hit_is_in_message_start(server):
    start_and_final_usage(server, body("Name a cat."))  # leaves the system prompt in the cache
    start, final = start_and_final_usage(server, body("Name a dog."))
    assert start["cache_read_input_tokens"] > 0 and start["output_tokens"] == 0
    assert input_side(start) == input_side(final)


def test_the_sdk_stream_helper_sees_the_same_input_side(server):
    client = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    request = {key: value for key, value in body("Name a bird.").items() if key != "stream"}
    client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        start = next(event for event in stream if event.type == "message_start").message.usage
        final = stream.get_final_message().usage
    assert start.cache_read_input_tokens > 0
    assert input_side(start) == input_side(final)

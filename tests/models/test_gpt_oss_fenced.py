"""A tiny random gpt-oss served by the real server on its defaults: the architecture chooses the
``harmony`` dialect and, the checkpoint shipping no template, the ``harmony`` chat format; a
required tool call in Chat Completions, Anthropic Messages and Responses is fenced into harmony's
call syntax and validates against its schema (the analysis written before it is a Messages
thinking block and a Responses reasoning item); the next turn (the call rendered back, its result
added) reuses the first turn's prompt and output from the cache.

The checkpoint carries the SmolLM2 tokenizer, in which harmony's markers are plain text, so what
the fence forces is all there is.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest

from tests.harness import ServerProcess
from tests.models.tiny_gpt_oss import write_tiny_gpt_oss

pytestmark = pytest.mark.slow

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon", "Oslo"]},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["city", "days"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast",
                                         "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "Forecast for Lyon, 3 days?"}]


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, timeout=180)
    assert reply.status_code == 200, reply.text
    return reply.json()


def chat(server, messages: list) -> dict:
    body = {"model": "tiny-gpt-oss", "messages": messages, "tools": [TOOL], "tool_choice": "required",
            "max_tokens": 96, "temperature": 0}
    reply = post(server, "/v1/chat/completions", body)
    assert reply["choices"][0]["finish_reason"] == "tool_calls", reply
    return reply


def valid(calls: list) -> None:
    assert calls and all(name == "get_forecast" for name, _ in calls)
    for _, arguments in calls:
        jsonschema.validate(arguments, PARAMETERS)


def test_a_required_call_in_harmony_validates_in_three_protocols(tmp_path):
    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    write_tiny_gpt_oss(tmp_path / "model", smollm2_from_gguf(), template="")
    settings = {"model": {"path": str(tmp_path / "model"), "name": "tiny-gpt-oss", "dtype": "fp32",
                          "max_context": 1024}, "cache": {"chunk_tokens": 64}}
    with ServerProcess(tmp_path / "server", settings=settings) as server:
        first = chat(server, ASK)
        message = first["choices"][0]["message"]
        valid([(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]])
        tool = {"name": "get_forecast", "description": "Weather forecast", "input_schema": PARAMETERS}
        anthropic = post(server, "/v1/messages", {"model": "tiny-gpt-oss", "max_tokens": 96, "messages": ASK,
                                                  "tools": [tool], "tool_choice": {"type": "any"}, "temperature": 0})
        assert anthropic["stop_reason"] == "tool_use", anthropic
        valid([(b["name"], b["input"]) for b in anthropic["content"] if b["type"] == "tool_use"])
        assert [block["type"] for block in anthropic["content"]] == ["thinking", "tool_use"], anthropic
        responses = post(server, "/v1/responses", {
            "model": "tiny-gpt-oss", "max_output_tokens": 96, "input": ASK, "tool_choice": "required",
            "temperature": 0, "tools": [{"type": "function", **TOOL["function"]}]})
        valid([(i["name"], json.loads(i["arguments"])) for i in responses["output"] if i["type"] == "function_call"])
        # this checkpoint thinks first: its analysis message is a thinking block / a reasoning item
        assert [item["type"] for item in responses["output"]] == ["reasoning", "function_call"], responses
        prompt = post(server, "/v1/tokenize", {"messages": ASK, "add_generation_prompt": True})["tokens"]
        call = message["tool_calls"][0]
        second = chat(server, ASK + [message, {"role": "tool", "tool_call_id": call["id"], "content": "Sunny"}])
        log = server.log()
    turn = len(prompt) + first["usage"]["completion_tokens"]  # the call renders back as it was written
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= turn - 1, (second["usage"], turn)
    assert "with the gpt_oss runtime" in log and "dialect harmony" in log, log[-2000:]

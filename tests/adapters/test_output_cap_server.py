"""A free-text answer with tools offered runs to the output cap and is labelled as cut off, in each
protocol, on the real server with the embedded model. The answer is written in characters that
span several tokens (the fence's grammar is not accepting between them), which once stopped the
text a call's length before the cap and labelled it complete."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
CAP = 60
SKULLS = "Write a line of skull emoji: ☠☠☠☠☠☠☠☠☠☠☠☠"  # the model answers in ☠ (3 tokens each)
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("output-cap"), {"model": {"max_context": 2048}}) as proc:
        yield proc


def post(server, path: str, body: dict) -> dict:
    response = httpx.post(server.base_url + path, json={"model": "smollm2", "temperature": 0, **body}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def test_chat_answer_reaches_the_cap_and_says_length(server):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
    answer = post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": SKULLS}], "tools": tools, "max_tokens": CAP})
    choice = answer["choices"][0]
    assert "☠" in choice["message"]["content"] and not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == CAP


def test_anthropic_answer_reaches_the_cap_and_says_max_tokens(server):
    tools = [{"name": "get_weather", "input_schema": PARAMETERS}]
    message = post(server, "/v1/messages", {
        "messages": [{"role": "user", "content": SKULLS}], "tools": tools, "max_tokens": CAP})
    assert [block["type"] for block in message["content"]] == ["text"] and "☠" in message["content"][0]["text"]
    assert message["stop_reason"] == "max_tokens"
    assert message["usage"]["output_tokens"] == CAP


def test_responses_answer_reaches_the_cap_and_is_incomplete(server):
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMETERS}]
    response = post(server, "/v1/responses", {"input": SKULLS, "tools": tools, "max_output_tokens": CAP,
                                              "store": False})
    assert [item["type"] for item in response["output"]] == ["message"]
    assert "☠" in response["output"][0]["content"][0]["text"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["usage"]["output_tokens"] == CAP

"""Chat Completions custom tools over the real server on the embedded model, with the official SDK.

A named custom call (``tool_choice: {type: custom}``) comes back as ``{type: "custom", custom:
{name, input}}`` with input its grammar accepts, streamed as ``custom.input`` fragments; resent in
an assistant message with its tool result, it renders the same prefix. ``required`` with only a
custom tool calls it within its regex. A grammar the backend cannot compile is a 400 naming it.
"""

from __future__ import annotations

import re

import openai
import pytest

from kvgate.plugins.lark_grammar.to_regex import lark_to_regex
from tests.adapters.codex_tools import EXEC_GRAMMAR
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
EXEC = {"type": "custom", "custom": {"name": "exec", "description": "Run JavaScript code.",
                                     "format": {"type": "grammar", "grammar": {"syntax": "lark",
                                                                               "definition": EXEC_GRAMMAR}}}}
LS = {"type": "custom", "custom": {"name": "shell", "description": "Run a shell command.",
                                   "format": {"type": "grammar", "grammar": {"syntax": "regex",
                                                                             "definition": "ls( -[al]{1,2})?"}}}}
MESSAGES = [{"role": "user", "content": "List the files here."}]
SHORT = {"model": "smollm2", "temperature": 0, "max_tokens": 40}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("custom_chat"), {"cache": {"cached_tokens_granularity": 1}}) as proc, \
            openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0) as client:
        yield client  # closed (its keep-alive connection too) before the server stops


@pytest.fixture(scope="module")
def named(client):
    return client.chat.completions.create(messages=MESSAGES, tools=[EXEC], parallel_tool_calls=False,
                                          tool_choice={"type": "custom", "custom": {"name": "exec"}}, **SHORT)


def test_named_custom_call(named):
    call = named.choices[0].message.tool_calls[0]
    assert call.type == "custom" and call.custom.name == "exec" and call.id.startswith("call_")
    assert re.fullmatch(lark_to_regex(EXEC_GRAMMAR), call.custom.input), call.custom.input


def test_streamed_custom_call(client, named):
    fragments = list(client.chat.completions.create(
        messages=MESSAGES, tools=[EXEC], parallel_tool_calls=False, stream=True,
        tool_choice={"type": "custom", "custom": {"name": "exec"}}, **SHORT))
    parts = [call.model_dump() for chunk in fragments if chunk.choices
             for call in chunk.choices[0].delta.tool_calls or []]
    assert parts[0]["type"] == "custom" and parts[0]["custom"]["name"] == "exec"  # the SDK keeps it as a dict
    assert "".join(part["custom"]["input"] for part in parts) == named.choices[0].message.tool_calls[0].custom.input


def test_resent_custom_call_renders_the_same_prefix(client, named):
    call = named.choices[0].message.tool_calls[0]
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "custom", "custom": {"name": "exec", "input": call.custom.input}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "a.txt b.txt"}]
    second = client.chat.completions.create(messages=history, tools=[EXEC], **{**SHORT, "max_tokens": 4})
    gap = named.usage.prompt_tokens + named.usage.completion_tokens - second.usage.prompt_tokens_details.cached_tokens
    assert 0 <= gap <= 1


def test_required_with_only_a_custom_tool(client):
    reply = client.chat.completions.create(messages=MESSAGES, tools=[LS], tool_choice="required", **SHORT)
    calls = reply.choices[0].message.tool_calls
    assert calls and all(c.type == "custom" and re.fullmatch("ls( -[al]{1,2})?", c.custom.input) for c in calls)


def test_grammar_the_backend_cannot_compile_is_a_400(client):
    atomic = {"type": "custom", "custom": {"name": "shell", "format": {"type": "grammar", "grammar": {
        "syntax": "regex", "definition": "(?>ls)"}}}}  # Python's re has atomic groups, Rust's regex not
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(messages=MESSAGES, tools=[atomic], tool_choice="required", **SHORT)
    assert "custom tool 'shell'" in error.value.body["message"] and error.value.body["param"] == "tools"

"""Custom tools through the adapters' conversions (no server): Responses tools at the top level, in
namespaces and in ``additional_tools`` items, Chat Completions tools and tool_choice, resent calls,
rendered events, and stored responses that keep a custom tool."""

from __future__ import annotations

import json

import pytest

from kvgate.adapters.openai_chat.messages import convert_message
from kvgate.adapters.openai_chat.tools import convert_tool_choice, convert_tools as chat_tools
from kvgate.adapters.responses.render import StreamRenderer
from kvgate.adapters.responses.request import parse_create
from kvgate.adapters.responses.store import StoredResponse
from kvgate.adapters.custom_tools import input_arguments
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import Finished, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, Usage
from tests.adapters.codex_tools import EXEC_GRAMMAR, additional_tools_item

REGEX = {"type": "grammar", "syntax": "regex", "definition": "ls( -l)?"}


def parse(body: dict):
    return parse_create({"model": "m", **body}, model="m", has_vision=False)


def test_codex_additional_tools_hold_the_custom_exec_tool():
    call = parse({"input": [additional_tools_item(), {"role": "user", "content": "hi"}],
                  "tool_choice": {"type": "custom", "name": "exec"}})
    exec_tool = call.chat.tools[0]
    assert (exec_tool.name, exec_tool.namespace, exec_tool.custom.syntax) == ("exec", "functions", "lark")
    assert exec_tool.custom.definition == EXEC_GRAMMAR and exec_tool.parameters["required"] == ["input"]
    assert [t.custom is None for t in call.chat.tools[1:]] == [True] * (len(call.chat.tools) - 1)
    assert (call.chat.tool_choice.mode, call.chat.tool_choice.name) == ("named", "functions__exec")


@pytest.mark.parametrize("fmt, param", [
    ({"type": "grammar", "syntax": 3, "definition": "x"}, "tools[0].format"),
    ({"type": "grammar", "syntax": "lark", "definition": 7}, "tools[0].format"),
    ({"type": "json"}, "tools[0].format")])
def test_bad_formats_are_a_400_naming_the_tool(fmt, param):
    with pytest.raises(InvalidRequest) as error:
        parse({"input": "x", "tools": [{"type": "custom", "name": "sh", "format": fmt}]})
    assert error.value.param == param


def test_resent_custom_call_needs_a_string_input():
    with pytest.raises(InvalidRequest) as error:
        parse({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "sh", "input": {"cmd": "ls"}}]})
    assert error.value.param == "input[0].input"


def test_chat_custom_tools_choice_and_history():
    tools = chat_tools([{"type": "custom", "custom": {"name": "sh", "format": {"type": "grammar", "grammar": {
        "syntax": "regex", "definition": "ls( -l)?"}}}}, {"type": "custom", "custom": {"name": "free"}}])
    assert [(t.name, t.custom.syntax) for t in tools] == [("sh", "regex"), ("free", "text")]
    choice, _ = convert_tool_choice({"type": "custom", "custom": {"name": "sh"}}, tools)
    assert (choice.mode, choice.name) == ("named", "sh")
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "custom", "custom": {"name": "free"}}]}}
    assert convert_tool_choice(allowed, tools) == (choice.__class__("named", "free"), ["free"])
    message = convert_message({"role": "assistant", "tool_calls": [
        {"id": "call_7", "type": "custom", "custom": {"name": "sh", "input": 'ls "a"'}}]}, "messages[1]", False)
    assert message.tool_calls[0].arguments == input_arguments('ls "a"') and message.tool_calls[0].id == "7"


def test_renderer_emits_custom_tool_call_items():
    call = parse({"input": "x", "tools": [{"type": "custom", "name": "sh", "format": REGEX}]})
    renderer = StreamRenderer({"output": []}, tools=call.chat.tools)
    arguments = json.dumps({"input": "ls -l"})
    events = renderer.feed(ToolCallStart(0, "1", "sh"))
    for piece in (arguments[:12], arguments[12:15], arguments[15:]):
        events += renderer.feed(ToolCallArgsDelta(0, piece))
    events += renderer.feed(ToolCallEnd(0, arguments)) + renderer.finish(Finished("tool_calls", Usage()))
    deltas = [e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == "ls -l" and renderer.response["output"][0]["input"] == "ls -l"
    assert renderer.response["output"][0]["type"] == "custom_tool_call"
    assert renderer.assistant.tool_calls[0].arguments == arguments  # history keeps the model's text


def test_stored_response_keeps_custom_tools():
    tools = parse({"input": "x", "tools": [{"type": "custom", "name": "sh", "format": REGEX}]}).chat.tools
    record = StoredResponse(response={}, input_items=[], messages=[], tools=tools, request_tools=tools)
    assert StoredResponse.from_json(record.to_json()).tools == tools

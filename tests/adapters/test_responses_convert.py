"""Responses create body -> canonical ChatRequest (pure conversion, no model)."""

from __future__ import annotations

import json

import pytest

from kvgate.adapters.responses.input_items import convert_input, encode_reasoning
from kvgate.adapters.responses.request import parse_create
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import Message, ToolCall


def parse(body, **kwargs):
    return parse_create(body, model="smollm2", has_vision=kwargs.pop("has_vision", False), **kwargs)


def test_string_input_with_instructions():
    call = parse({"input": "hi", "instructions": "be brief", "max_output_tokens": 8, "temperature": 0})
    assert [(m.role, m.content) for m in call.chat.messages] == [("system", "be brief"), ("user", "hi")]
    assert call.chat.sampling.max_tokens == 8 and call.chat.sampling.temperature == 0
    assert [m.role for m in call.conversation] == ["user"]  # instructions are not part of the chain
    assert call.store is True and call.stream is False and call.chat.request_id


def test_codex_like_history_forms_one_assistant_turn_per_response():
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": "list files"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "use ls"}],
         "encrypted_content": None},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Running ls."}]},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call", "call_id": "call_2", "name": "read", "arguments": "{}", "namespace": "fs"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "x"}, {"type": "input_text", "text": "y"}]},
        {"type": "web_search_call", "id": "ws_1"},
    ]
    messages = parse({"input": items}).chat.messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    turn = messages[2]
    assert (turn.reasoning, turn.content) == ("use ls", "Running ls.")
    assert turn.tool_calls == [ToolCall("call_1", "shell", '{"cmd":"ls"}'), ToolCall("call_2", "read", "{}", "fs")]
    assert [(m.tool_call_id, m.name, m.content) for m in messages[3:]] == [
        ("call_1", "shell", "a.txt"), ("call_2", "read", "xy")]


def test_reasoning_comes_back_from_our_encrypted_content():
    items = [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "short"}],
              "encrypted_content": encode_reasoning("the full thought")}]
    assert convert_input(items, False).messages[0].reasoning == "the full thought"
    items[0]["encrypted_content"] = "opaque-from-elsewhere"
    assert convert_input(items, False).messages[0].reasoning == "short"


def test_namespace_and_hosted_tools_and_additional_tools():
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": False},
             {"type": "namespace", "name": "mcp", "description": "d",
              "tools": [{"type": "function", "name": "fetch", "description": "get", "parameters": None}]},
             {"type": "web_search"}, {"type": "local_shell"}, {"type": "tool_search", "execution": "client"},
             {"type": "custom", "name": "apply_patch"}]
    extra = {"type": "additional_tools", "role": "developer",
             "tools": [{"type": "function", "name": "late", "parameters": {"type": "object"}}]}
    call = parse({"input": [extra, {"role": "user", "content": "go"}], "tools": tools,
                  "tool_choice": {"type": "function", "name": "fetch"}, "parallel_tool_calls": False})
    names = [(t.name, t.namespace) for t in call.chat.tools]
    assert names == [("shell", None), ("fetch", "mcp"), ("apply_patch", None), ("late", None)]
    assert call.chat.tools[2].custom is not None and call.chat.tools[2].custom.syntax == "text"
    assert call.chat.tools[1].qualified_name == "mcp__fetch" and call.chat.tools[1].description == "get"
    assert (call.chat.tool_choice.mode, call.chat.tool_choice.name) == ("named", "mcp__fetch")
    assert call.chat.parallel_tool_calls is False


@pytest.mark.parametrize("choice, mode", [("auto", "auto"), ("none", "none"), ("required", "required"),
                                          ({"type": "web_search_preview"}, "auto"),
                                          ({"type": "allowed_tools", "mode": "required", "tools": []}, "required")])
def test_tool_choice_modes(choice, mode):
    call = parse({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": choice})
    assert call.chat.tool_choice.mode == mode


def test_previous_conversation_is_continued_without_old_instructions():
    prior = [Message(role="user", content="q"),
             Message(role="assistant", tool_calls=[ToolCall("call_9", "lookup", "{}")])]
    call = parse({"input": [{"type": "function_call_output", "call_id": "call_9", "output": "42"}],
                  "instructions": "new rules"}, prior=prior, prior_cache_key="thread-1")
    assert [m.role for m in call.chat.messages] == ["system", "user", "assistant", "tool"]
    assert call.chat.messages[-1].name == "lookup" and call.chat.cache_key == "thread-1"
    assert len(prior) == 2 and prior[1].tool_calls[0].id == "call_9"  # the prior list is not changed
    more = parse({"input": [{"type": "function_call", "call_id": "call_10", "name": "x", "arguments": "{}"}]},
                 prior=prior)
    assert len(more.conversation) == 2 and len(more.conversation[1].tool_calls) == 2
    assert len(prior[1].tool_calls) == 1


def test_cache_key_sources_in_order():
    assert parse({"input": "x", "prompt_cache_key": "p", "user": "u"}).chat.cache_key == "p"
    assert parse({"input": "x", "user": "u"}).chat.cache_key == "u"
    assert parse({"input": "x", "prompt_cache_key": "p"}, header_cache_key="h").chat.cache_key == "h"


def test_text_format_and_reasoning_switch():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    call = parse({"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": schema,
                                                    "strict": True}}, "reasoning": {"effort": "none"}})
    assert (call.chat.response_format.type, call.chat.response_format.schema) == ("json_schema", schema)
    assert call.chat.reasoning is False
    assert parse({"input": "x", "reasoning": {"summary": "auto"}}).chat.reasoning is True
    assert parse({"input": "x"}).chat.reasoning is None


def test_logprobs_come_with_include():
    call = parse({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 5})
    assert (call.chat.sampling.logprobs, call.chat.sampling.top_logprobs) == (True, 5)
    assert parse({"input": "x", "top_logprobs": 3}).chat.sampling.logprobs is False
    assert parse({"input": "x", "include": ["message.output_text.logprobs"]}).chat.sampling.top_logprobs == 0


def test_unknown_fields_are_ignored():
    body = {"input": "x", "client_metadata": {"a": "b"}, "context_management": [{"type": "x"}], "generate": True,
            "include": ["reasoning.encrypted_content"], "stream_options": {}, "service_tier": "auto"}
    assert parse(body).wants_encrypted_reasoning


@pytest.mark.parametrize("body, param", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c",
                 "output": [{"type": "input_image", "image_url": "data:,"}]}]}, "input[0].output[0]"),
    ({"input": 5}, "input"),
    ({"input": [{"role": "boss", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}]},
     "input[0].arguments"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}},
     "tool_choice.name"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "temperature": "hot"}, "temperature"),
    ({"input": "x", "top_logprobs": 21}, "top_logprobs"),
    ({"input": "x", "top_logprobs": True}, "top_logprobs"),
    ({"input": "x", "top_logprobs": 1.5}, "top_logprobs"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "instructions": ["a"]}, "instructions"),
    ({"input": []}, "input"),
])
def test_bad_input_gets_a_400_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as error:
        parse(body)
    assert error.value.status == 400 and error.value.param == param


def test_image_message_names_missing_vision():
    with pytest.raises(InvalidRequest, match="no vision"):
        parse({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})


def test_custom_tool_call_history_keeps_its_input():
    items = [{"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"},
             {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}]
    messages = parse({"input": items}).chat.messages
    assert json.loads(messages[0].tool_calls[0].arguments) == {"input": "*** Begin"}
    assert messages[1].name == "apply_patch"


WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_additional_tools_stay_in_force_along_the_chain():
    """Tools announced by an ``additional_tools`` item belong to the conversation (Codex's WebSocket
    follow-up holds only the tool output and ``previous_response_id``)."""
    first = parse({"input": [{"type": "additional_tools", "role": "developer", "tools": [WEATHER_TOOL]},
                             {"role": "user", "content": "weather in Paris?"}]})
    assert [t.name for t in first.conversation_tools] == ["get_weather"] and first.request_tools == []
    prior = first.conversation + [Message(role="assistant", tool_calls=[ToolCall("call_1", "get_weather", "{}")])]
    follow = parse({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
                    "tool_choice": "required"}, prior=prior, prior_tools=first.conversation_tools)
    assert [t.name for t in follow.chat.tools] == ["get_weather"] and follow.chat.tool_choice.mode == "required"
    assert [t.name for t in follow.conversation_tools] == ["get_weather"]


def test_top_level_tools_are_inherited_only_when_passed_and_absent():
    tools = parse({"input": "x", "tools": [WEATHER_TOOL]}).request_tools
    assert [t.name for t in parse({"input": "y"}, inherited_tools=tools).chat.tools] == ["get_weather"]
    assert parse({"input": "y", "tools": []}, inherited_tools=tools).chat.tools == []  # an explicit empty list
    assert parse({"input": "y"}).chat.tools == []  # HTTP: tools are per request
    with pytest.raises(InvalidRequest):
        parse({"input": "y", "tool_choice": "required"})


@pytest.mark.parametrize("metadata, param", [
    ({f"k{i}": "v" for i in range(17)}, "metadata"),
    ({"k" * 65: "v"}, "metadata"),
    ({"k": "v" * 513}, "metadata.k"),
    ({"k": 3}, "metadata.k"),
])
def test_metadata_past_openais_limits_is_refused(metadata, param):
    with pytest.raises(InvalidRequest) as refused:
        parse({"input": "x", "metadata": metadata})
    assert refused.value.param == param


def test_metadata_at_openais_limits_is_kept():
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    assert parse({"input": "x", "metadata": metadata}).chat.request_id

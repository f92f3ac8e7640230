"""Chat Completions request body -> canonical ChatRequest (pure functions, no server)."""

from __future__ import annotations

import pytest

from kvgate.adapters.openai_chat.request import to_chat_request
from kvgate.core.errors import InvalidRequest

USER = {"role": "user", "content": "hi"}


def convert(body: dict, has_vision: bool = False, headers: dict | None = None):
    return to_chat_request({"model": "m", **body}, "served", has_vision, headers)


def error_param(body: dict, has_vision: bool = False) -> str:
    with pytest.raises(InvalidRequest) as info:
        convert(body, has_vision)
    assert info.value.status == 400 and info.value.message
    return info.value.param


def test_roles_parts_and_history_convert():
    req = convert({"messages": [
        {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}], "name": "bob"},
        {"role": "assistant", "content": None, "reasoning_content": "think",
         "tool_calls": [{"id": "call_abc", "type": "function",
                         "function": {"name": "f", "arguments": '{ "a" :1}'}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": [{"type": "text", "text": "42"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "refusal", "refusal": "r"}],
         "reasoning": "alt"},
    ]})
    roles = [m.role for m in req.messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "assistant"]
    assert req.messages[0].content == "a\nb" and req.messages[2].content == "x\ny"
    assert req.messages[2].name == "bob"
    call = req.messages[3].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("abc", "f", '{ "a" :1}')
    assert req.messages[3].content == "" and req.messages[3].reasoning == "think"
    assert req.messages[4].tool_call_id == "abc" and req.messages[4].content == "42"
    assert req.messages[5].reasoning == "alt" and req.messages[5].content == "t\nr"
    assert req.model == "served" and req.request_id


def test_request_ids_are_fresh():
    assert convert({"messages": [USER]}).request_id != convert({"messages": [USER]}).request_id


def test_sampling_fields():
    s = convert({"messages": [USER], "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": 7,
                 "max_tokens": 10, "max_completion_tokens": 12, "stop": "END", "presence_penalty": 0.5,
                 "frequency_penalty": -0.5, "repetition_penalty": 1.1}).sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (0.5, 0.9, 40, 0.1, 7)
    assert s.max_tokens == 12 and s.stop == ["END"]
    assert (s.presence_penalty, s.frequency_penalty, s.repetition_penalty) == (0.5, -0.5, 1.1)
    assert convert({"messages": [USER], "max_tokens": 5, "stop": ["a", "", "b"]}).sampling.stop == ["a", "b"]
    assert convert({"messages": [USER], "max_tokens": 5}).sampling.max_tokens == 5
    assert convert({"messages": [USER], "top_k": -1}).sampling.top_k == 0
    assert convert({"messages": [USER]}).sampling.max_tokens is None


def test_logprobs_fields():
    s = convert({"messages": [USER], "logprobs": True, "top_logprobs": 20}).sampling
    assert (s.logprobs, s.top_logprobs) == (True, 20)
    s = convert({"messages": [USER], "logprobs": False, "top_logprobs": 0}).sampling
    assert (s.logprobs, s.top_logprobs) == (False, 0)
    assert convert({"messages": [USER], "logprobs": None, "top_logprobs": None}).sampling.logprobs is False


def test_tools_and_tool_choice():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}},
             {"type": "function", "function": {"name": "g", "description": "gee"}}]
    req = convert({"messages": [USER], "tools": tools, "parallel_tool_calls": False})
    assert [t.name for t in req.tools] == ["f", "g"] and req.tools[0].strict and req.tools[1].description == "gee"
    assert req.tools[1].parameters == {"type": "object", "properties": {}}
    assert req.tool_choice.mode == "auto" and req.parallel_tool_calls is False
    assert convert({"messages": [USER]}).tool_choice.mode == "none"
    assert convert({"messages": [USER], "tools": tools, "tool_choice": "required"}).tool_choice.mode == "required"
    named = convert({"messages": [USER], "tools": tools, "tool_choice": {"type": "function", "function": {"name": "g"}}})
    assert (named.tool_choice.mode, named.tool_choice.name) == ("named", "g")


def test_allowed_tools():
    tools = [{"type": "function", "function": {"name": n}} for n in ("f", "g", "h")]
    def allowed(mode, names):
        spec = {"mode": mode, "tools": [{"type": "function", "function": {"name": n}} for n in names]}
        return convert({"messages": [USER], "tools": tools, "tool_choice": {"type": "allowed_tools", "allowed_tools": spec}})
    req = allowed("auto", ["f", "h"])
    assert req.tool_choice.mode == "auto" and req.extra["allowed_tools"] == ["f", "h"] and len(req.tools) == 3
    one = allowed("required", ["g"])
    assert (one.tool_choice.mode, one.tool_choice.name) == ("named", "g")


def test_response_format_reasoning_and_cache_key():
    rf = convert({"messages": [USER], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}, "strict": True}}}).response_format
    assert (rf.type, rf.name, rf.schema, rf.strict) == ("json_schema", "x", {"type": "object"}, True)
    assert convert({"messages": [USER], "response_format": {"type": "json_object"}}).response_format.type == "json_object"
    assert convert({"messages": [USER]}).reasoning is None
    assert convert({"messages": [USER], "reasoning_effort": "none"}).reasoning is False
    assert convert({"messages": [USER], "reasoning_effort": "low"}).reasoning is True
    assert convert({"messages": [USER], "reasoning_effort": "high",
                    "chat_template_kwargs": {"enable_thinking": False}}).reasoning is False
    assert convert({"messages": [USER], "user": "u", "prompt_cache_key": "p"}).cache_key == "p"
    assert convert({"messages": [USER], "user": "u"}).cache_key == "u"
    assert convert({"messages": [USER], "user": "u"}, headers={"x-kvgate-cache-key": "h"}).cache_key == "h"
    assert convert({"messages": [USER]}).cache_key is None


def test_unknown_fields_and_nulls_are_ignored():
    req = convert({"messages": [USER], "context_management": {"x": 1}, "metadata": {}, "store": False,
                   "temperature": None, "tools": None, "stop": None, "n": 1, "logprobs": False})
    assert req.sampling.temperature == 1.0 and req.tools == [] and req.sampling.stop == []


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": ["hi"]}, "messages[0]"),
    ({"messages": [USER, {"role": "user", "content": 5}]}, "messages[1].content"),
    ({"messages": [{"content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ({"messages": [USER], "model": 3}, "model"),
    ({"messages": [USER], "temperature": "hot"}, "temperature"),
    ({"messages": [USER], "temperature": 3}, "temperature"),
    ({"messages": [USER], "max_tokens": True}, "max_tokens"),
    ({"messages": [USER], "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": [USER], "seed": 1.5}, "seed"),
    ({"messages": [USER], "stop": 5}, "stop"),
    ({"messages": [USER], "n": 2}, "n"),
    ({"messages": [USER], "logprobs": "yes"}, "logprobs"),
    ({"messages": [USER], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": [USER], "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"messages": [USER], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [USER], "stream": "yes"}, "stream"),
    ({"messages": [USER], "tools": {}}, "tools"),
    ({"messages": [USER], "tools": [{"type": "custom", "custom": {"name": "c", "format": {"type": "grammar", "grammar": {
        "syntax": "lark", "definition": 5}}}}]},
     "tools[0].custom.format.grammar.definition"),  # a grammar's definition is its text
    ({"messages": [USER], "tools": [{"type": "shell"}]}, "tools[0].type"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "tools[1].function.name"),
    ({"messages": [USER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": [USER], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "zz"}}}, "tool_choice.function.name"),
    ({"messages": [USER], "response_format": {"type": "yaml"}}, "response_format.type"),
    ({"messages": [USER], "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"messages": [USER], "reasoning_effort": 3}, "reasoning_effort"),
    ({"messages": [USER], "chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
])
def test_invalid_input_names_the_field(body, param):
    assert error_param(body) == param


def test_image_message_says_no_vision():
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}
    with pytest.raises(InvalidRequest, match="no vision"):
        convert(body)
    with pytest.raises(InvalidRequest, match="text only"):
        convert(body, has_vision=True)


def test_ignore_eos_extension_is_carried_and_typed():
    from kvgate.adapters.openai_chat.request import to_chat_request
    from kvgate.core.errors import InvalidRequest

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert to_chat_request({**body, "ignore_eos": True}, "m", False).extra.get("ignore_eos") is True
    assert "ignore_eos" not in to_chat_request(body, "m", False).extra
    with pytest.raises(InvalidRequest):
        to_chat_request({**body, "ignore_eos": "yes"}, "m", False)

"""Qwen3-Coder XML: reference goldens, render -> parse -> render identity, every split, schema typing
of raw values (strings with newlines and markup, numbers that look like strings)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import (TOOLS, WEATHER, call_id, calls, check_streaming, feed, issues, merge, rebuild,
                             texts)
from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.types import ChatRequest, Message, ToolCall, ToolCallEnd
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TWO_CALLS = [
    Message("user", "Paris and Rome?"),
    Message("assistant", "Checking both.", tool_calls=[
        ToolCall("a", "get_weather", '{"city": "Paris"}'),
        ToolCall("b", "get_weather", '{"city": "Rome", "days": 3, "opts": {"unit": "C"}}')]),
    Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]
ONE_CALL = [Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
            Message("tool", '{"temp": 21}', tool_call_id="a")]
# dialects.md C.3 (golden qwen3coder_two_calls) for the assistant turn; results per C.3's rule
GOLDEN_TWO = (
    "<|im_start|>user\nParis and Rome?<|im_end|>\n<|im_start|>assistant\nChecking both.\n\n<tool_call>\n"
    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
    "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    '<parameter=opts>\n{"unit": "C"}\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n'
    "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n</tool_response>\n<|im_end|>\n"
    "<|im_start|>assistant\n")
GOLDEN_ONE = (
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
    '<|im_end|>\n<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response>\n<|im_end|>\n'
    "<|im_start|>assistant\n")
# the tool block as the Qwen3-Coder template renders it (dialects.md C.3 gives its shape, not these
# bytes; checked against the template's logic as recalled, not against an official copy)
GOLDEN_TOOLS = (
    "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    "<function>\n<name>get_weather</name>\n<description>Get the weather</description>\n<parameters>\n"
    "<parameter>\n<name>city</name>\n<type>string</type>\n<description>City name</description>\n</parameter>\n"
    "<parameter>\n<name>days</name>\n<type>integer</type>\n<enum>[1, 3]</enum>\n</parameter>\n"
    '<required>["city"]</required>\n<additionalProperties>False</additionalProperties>\n</parameters>\n'
    "</function>\n</tools>\n\nIf you choose to call a function ONLY reply in the following format")


def prompt(messages, tools=()):
    return JinjaChatFormat(CHATML, Qwen3CoderXml(), {}).render(ChatRequest("m", messages, tools=list(tools)))


@pytest.mark.parametrize("messages,golden", [(TWO_CALLS, GOLDEN_TWO), (ONE_CALL, GOLDEN_ONE)], ids=["two", "one"])
def test_reference_goldens(messages, golden):
    assert prompt(messages) == golden


def test_tool_definitions_in_the_system_turn():
    from kvgate.core.types import Tool

    tool = Tool("get_weather", "Get the weather", {
        "type": "object", "properties": {"city": {"type": "string", "description": "City name "},
                                         "days": {"type": "integer", "enum": [1, 3]}},
        "required": ["city"], "additionalProperties": False})
    text = prompt([Message("system", "You are helpful."), Message("user", "hi")], [tool])
    assert text.startswith(GOLDEN_TOOLS)
    assert "</IMPORTANT><|im_end|>\n<|im_start|>user\nhi<|im_end|>\n" in text
    default = prompt([Message("user", "hi")], [tool])
    assert default.startswith("<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact "
                              "with a computer to solve tasks.\n\n# Tools\n\n")
    assert prompt([Message("user", "hi")]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def parse(text, tools=TOOLS):
    return merge(feed(Qwen3CoderXml().new_parser(tools, call_id), [text]))


def test_reasoning_before_calls_is_read():
    text = ("<think>\nNeed the weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
            "Paris\n</parameter>\n</function>\n</tool_call>")
    message = rebuild(parse(text))
    assert message.reasoning == "Need the weather." and message.content == ""
    assert message.tool_calls[0].arguments == '{"city": "Paris"}'


RAW_VALUES = [("city", "line one\nline two\n"), ("city", "<b>bold</b> <parameter=x> </function>"),
              ("zip", "123"), ("zip", "03106"), ("zip", "true"), ("zip", "null"), ("city", "\nleading"),
              ("city", ""), ("city", '{"not": "an object"}')]


@pytest.mark.parametrize("key,value", RAW_VALUES)
def test_raw_string_values_round_trip_typed_by_the_schema(key, value):
    arguments = json.dumps({key: value, "days": 12}, ensure_ascii=False)
    text = Qwen3CoderXml().render_tool_call("get_weather", arguments)
    events = parse(text)
    assert not issues(events) and events[-1] == ToolCallEnd(0, arguments)
    assert Qwen3CoderXml().render_tool_call("get_weather", events[-1].arguments) == text


def test_typed_values_and_python_scalars():
    head = "<tool_call>\n<function=get_weather>\n"
    text = head + "<parameter=days>\n7\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n</function>\n</tool_call>"
    assert parse(text)[-1] == ToolCallEnd(0, '{"days": 7, "flag": true}')
    loose = head + "<parameter=days>x7</parameter>\n</function>\n</tool_call>"
    assert parse(loose)[-1] == ToolCallEnd(0, '{"days": "x7"}')  # not JSON: kept as a string


def test_duplicate_unknown_and_unclosed():
    head = "<tool_call>\n<function=get_weather>\n"
    dup = parse(head + "<parameter=city>\na\n</parameter>\n<parameter=city>\nb\n</parameter>\n</function>\n</tool_call>")
    assert [i.message for i in issues(dup)] == ["duplicate parameter 'city'"]
    assert dup[-1] == ToolCallEnd(0, '{"city": "a"}')
    unknown = parse("<tool_call>\n<function=nope>\n</function>\n</tool_call>after")
    assert "unknown tool 'nope'" in issues(unknown)[0].message and unknown[-1].text == "after"
    unclosed = parse(head + "<parameter=city>\nPar")
    assert issues(unclosed)[0].message == "unclosed tool call"
    assert not any(isinstance(e, ToolCallEnd) for e in unclosed)  # started, never ended
    assert WEATHER.name == "get_weather"


def renderable(message: Message) -> bool:
    """The wire cannot carry a string value holding its own closing tag (the fence forbids it)."""
    return all("</parameter>" not in str(v) for c in message.tool_calls for v in json.loads(c.arguments).values())


@st.composite
def messages(draw):
    content = draw(texts).strip()
    return Message("assistant", content, tool_calls=draw(calls()))


CUTS = st.lists(st.lists(st.integers(0, 500), max_size=6), min_size=1, max_size=3)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(message=messages().filter(renderable), cut_lists=CUTS)
def test_round_trip_and_random_splits(message, cut_lists):
    dialect = Qwen3CoderXml()
    text = dialect.assistant_content(message)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_content(again) == text
    assert [c.arguments for c in again.tool_calls] == [c.arguments for c in message.tool_calls]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(message=messages().filter(renderable))
def test_every_split_position(message):
    dialect = Qwen3CoderXml()
    text = dialect.assistant_content(message)
    check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, [[i] for i in range(1, len(text))],
                    message.content)

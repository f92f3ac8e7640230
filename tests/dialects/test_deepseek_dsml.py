"""DeepSeek DSML: reference goldens, identity, streaming splits, V4 escaping, malformed blocks."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import (TOOLS, call_id, calls, check_streaming, feed, issues, merge, rebuild,
                             texts)
from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolCallEnd
from kvgate.dialects.deepseek_dsml.dialect import escape_value, unescape_value
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_dsml import format_factory

WEATHER = Tool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})
ONE_CALL = [Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
            Message("tool", '{"temp": 21}')]
TWO_CALLS = [Message("user", "Paris and Rome?"),
             Message("assistant", "Checking both.", reasoning="need two calls", tool_calls=[
                 ToolCall("a", "get_weather", '{"city": "Paris"}'),
                 ToolCall("b", "get_weather", '{"city": "Rome", "days": 3, "opts": {"unit": "C"}}')]),
             Message("tool", "sunny"), Message("tool", "rainy")]
CHAT_ONE_CALL = '<｜User｜>Weather in Paris?<｜Assistant｜></think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>{"temp": 21}</result>\n</function_results>\n\n</think>'
THINKING_TWO_CALLS = '<｜begin▁of▁sentence｜><｜User｜>Paris and Rome?<｜Assistant｜><think>need two calls</think>Checking both.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n<｜DSML｜parameter name="opts" string="false">{"unit": "C"}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n<function_results>\n<result>sunny</result>\n<result>rainy</result>\n</function_results>\n\n<think>'


def test_v32_reference_goldens():
    fmt = format_factory("v32")(None, None)
    prompt = fmt.render(ChatRequest("m", ONE_CALL, tools=[WEATHER]))
    assert prompt.startswith("<｜begin▁of▁sentence｜>\n\n## Tools\nYou have access to a set of tools")
    assert prompt.endswith("</functions>\n" + CHAT_ONE_CALL)
    assert '\n<functions>\n{"name": "get_weather", "description": "", "parameters"' not in prompt
    assert fmt.render(ChatRequest("m", TWO_CALLS, reasoning=True)) == THINKING_TWO_CALLS
    assert fmt.parser_start(ChatRequest("m", TWO_CALLS, reasoning=True)) == "reasoning"
    with pytest.raises(InvalidRequest):
        fmt.render(ChatRequest("m", ONE_CALL + [Message("tool", "extra")]))


def test_v32_system_prompt_before_tools_and_drop_thinking():
    fmt = format_factory("v32")(None, DeepseekDsml("v32"))
    history = [Message("system", "Be brief.")] + TWO_CALLS + [Message("user", "and Oslo?")]
    prompt = fmt.render(ChatRequest("m", history, tools=[WEATHER], reasoning=True))
    assert prompt.startswith("<｜begin▁of▁sentence｜>Be brief.\n\n## Tools\n")
    assert "need two calls" not in prompt and prompt.endswith("<｜User｜>and Oslo?<｜Assistant｜><think>")


def test_v4_merges_results_into_the_user_turn_and_keeps_reasoning_with_tools():
    fmt = format_factory("v4")(None, None)
    history = TWO_CALLS + [Message("user", "thanks")]
    prompt = fmt.render(ChatRequest("m", history, tools=[WEATHER], reasoning=True))
    assert "### Available Tool Schemas\n\n" + json.dumps({"name": "get_weather", "parameters": WEATHER.parameters}) in prompt
    assert ("<｜Assistant｜><think>need two calls</think>Checking both.\n\n<｜DSML｜tool_calls>\n" in prompt)
    assert prompt.endswith("</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>sunny</tool_result>"
                           "\n\n<tool_result>rainy</tool_result>\n\nthanks<｜Assistant｜><think>")
    chat = fmt.render(ChatRequest("m", TWO_CALLS[:1]))
    assert chat == "<｜begin▁of▁sentence｜><｜User｜>Paris and Rome?<｜Assistant｜></think>"


@pytest.mark.parametrize("text", ["", "a</｜DSML｜parameter>b", "&lt;/｜DSML｜parameter>",
                                  "&amp;lt;/｜DSML｜parameter>&", "x&amp;y"])
def test_v4_escaping_is_invertible(text):
    escaped = escape_value(text)
    assert "</｜DSML｜parameter>" not in escaped and unescape_value(escaped) == text


V4_TEXTS = st.lists(st.sampled_from(["a", "</｜DSML｜parameter>", "&lt;/｜DSML｜parameter>", "&", "amp;",
                                     "lt;", "<", "\n", "ü"]), max_size=8).map("".join)


@st.composite
def messages(draw, variant):
    found = draw(calls())
    if variant == "v4" and found and draw(st.booleans()):
        found[0] = ToolCall("e", "get_weather", json.dumps({"city": draw(V4_TEXTS)}, ensure_ascii=False))
    reasoning = draw(st.one_of(st.none(), texts))
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=found)


CUTS = st.lists(st.lists(st.integers(0, 800), max_size=6), min_size=1, max_size=3)


@pytest.mark.parametrize("variant", ["v32", "v4"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cut_lists=CUTS, thinking=st.booleans())
def test_round_trip_and_random_splits(variant, data, cut_lists, thinking):
    dialect = DeepseekDsml(variant)
    message = data.draw(messages(variant))
    text = dialect.assistant_body(message, thinking)
    start = "reasoning" if thinking else "content"
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id, start_in=start), text, cut_lists,
                             message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again, thinking) == text
    assert [json.loads(c.arguments) for c in again.tool_calls] == [json.loads(c.arguments) for c in message.tool_calls]


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_split_position(data):
    dialect = DeepseekDsml("v4")
    message = data.draw(messages("v4"))
    text = dialect.assistant_body(message, False)
    check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, [[i] for i in range(1, len(text))],
                    message.content)


def parse(text, variant="v32"):
    return merge(feed(DeepseekDsml(variant).new_parser(TOOLS, call_id), [text]))


P = "｜DSML｜"


def test_duplicate_parameter_bad_json_unknown_and_unclosed():
    dup = parse(f'\n\n<{P}function_calls>\n<{P}invoke name="get_weather">\n<{P}parameter name="city" string="true">a</{P}parameter>\n<{P}parameter name="city" string="true">b</{P}parameter>\n</{P}invoke>\n</{P}function_calls>')
    assert [i.message for i in issues(dup)] == ["duplicate parameter 'city'"]
    assert dup[-1] == ToolCallEnd(0, '{"city": "a"}')
    bad = parse(f'<{P}function_calls><{P}invoke name="get_weather"><{P}parameter name="days" string="false">tw o</{P}parameter></{P}invoke></{P}function_calls>')
    assert issues(bad)[0].message == "parameter value is not valid JSON"
    unknown = parse(f'<{P}function_calls>\n<{P}invoke name="nope">\n</{P}invoke>\n</{P}function_calls>')
    assert "unknown tool 'nope'" in issues(unknown)[0].message
    unclosed = parse(f'Hi\n\n<{P}function_calls>\n<{P}invoke name="get_weather">\n<{P}parameter name="city" string="true">Par')
    assert issues(unclosed)[0].message == "unclosed tool call" and not any(isinstance(e, ToolCallEnd) for e in unclosed)
    open_block = parse(f'\n\n<{P}function_calls>\n<{P}invoke name="get_weather">\n</{P}invoke>\n')
    assert "unclosed" in issues(open_block)[-1].message

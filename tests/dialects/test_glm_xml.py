"""GLM XML: reference goldens, render -> parse -> render identity, streaming splits, schema typing."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import TOOLS, WEATHER, call_id, calls, check_streaming, feed, issues, merge, rebuild, texts
from kvgate.core.types import ChatRequest, Message, ToolCall, ToolCallEnd, ToolCallStart
from kvgate.dialects.glm_xml import GlmChatFormat, GlmXml

TWO_CALLS = [
    Message("user", "Paris and Rome?"),
    Message("assistant", "Checking both.", reasoning="need two calls", tool_calls=[
        ToolCall("a", "get_weather", '{"city": "Paris"}'),
        ToolCall("b", "get_weather", '{"city": "Rome", "days": 3, "opts": {"unit": "C"}}')]),
    Message("tool", "sunny"), Message("tool", "rainy")]
ONE_CALL = [Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
            Message("tool", '{"temp": 21}')]

GOLDENS = {
    ("glm45", "two"): '[gMASK]<sop><|user|>\nParis and Rome?<|assistant|>\n<think>need two calls</think>\nChecking both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{"unit": "C"}</arg_value>\n</tool_call><|observation|>\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n</tool_response><|assistant|>',
    ("glm47", "two"): '[gMASK]<sop><|user|>Paris and Rome?<|assistant|><think>need two calls</think>Checking both.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{"unit": "C"}</arg_value></tool_call><|observation|><tool_response>sunny</tool_response><tool_response>rainy</tool_response><|assistant|><think>',
    ("glm45", "one"): '[gMASK]<sop><|user|>\nWeather in Paris?<|assistant|>\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call><|observation|>\n<tool_response>\n{"temp": 21}\n</tool_response><|assistant|>',
}


@pytest.mark.parametrize("variant,conv", sorted(GOLDENS))
def test_reference_goldens(variant, conv):
    messages = TWO_CALLS if conv == "two" else ONE_CALL
    assert GlmChatFormat(GlmXml(variant)).render(ChatRequest("m", messages)) == GOLDENS[(variant, conv)]


GLM47_CONVERSATION = [
    Message("system", "Be brief."), Message("user", "Weather in Zürich?"),
    Message("assistant", "Checking.", reasoning="need tool", tool_calls=[
        ToolCall("c1", "get_weather", '{"city": "Zürich", "days": 2}'), ToolCall("c2", "get_weather", '{"city": "Bern"}')]),
    Message("tool", "sunny", tool_call_id="c1"), Message("tool", "rainy", tool_call_id="c2"),
    Message("assistant", "It is sunny.", reasoning="done"), Message("user", "thanks")]
# The bytes a published copy of GLM-4.7's chat template renders for GLM47_CONVERSATION with one tool
# (get_weather, "Weather", city: string, days: integer) and the generation prompt.
GLM47_OFFICIAL = (
    "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": '
    '{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}\n</tools>\n\n'
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>"
    "{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call><|system|>Be brief.<|user|>Weather in "
    "Zürich?<|assistant|></think>Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich</arg_value>"
    "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key>"
    "<arg_value>Bern</arg_value></tool_call><|observation|><tool_response>sunny</tool_response><tool_response>rainy"
    "</tool_response><|assistant|></think>It is sunny.<|user|>thanks<|assistant|><think>")
# A template of our own in the layout of GLM's published ones: role markers, and tool results wrapped
# by the template (<|observation|> once per run of results, then the response tags).
GLM_STYLE_TEMPLATE = (
    "[gMASK]<sop>{%- for m in messages -%}"
    "{%- if m.role == 'tool' -%}{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}<|observation|>"
    "{%- endif -%}<tool_response>{{ m.content }}</tool_response>"
    "{%- else -%}<|{{ m.role }}|>{{ m.content }}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|><think>{%- endif -%}")


def test_glm47_matches_its_published_template():
    from kvgate.plugins.jinja_chat_format import JinjaChatFormat
    from kvgate.core.types import Tool

    tool = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"},
                                                                            "days": {"type": "integer"}}})
    request = ChatRequest("m", GLM47_CONVERSATION, tools=[tool])
    assert GlmChatFormat(GlmXml("glm47")).render(request) == GLM47_OFFICIAL
    # served on the defaults, the model's own template wraps the results: they reach it raw
    assert JinjaChatFormat(GLM_STYLE_TEMPLATE, GlmXml("glm47"), {}).render(request) == GLM47_OFFICIAL


def test_thinking_off_and_history_forms():
    glm45 = GlmChatFormat(GlmXml("glm45")).render(ChatRequest("m", TWO_CALLS[:1], reasoning=False))
    assert glm45 == "[gMASK]<sop><|user|>\nParis and Rome?/nothink<|assistant|>\n<think></think>"
    glm47 = GlmChatFormat(GlmXml("glm47")).render(ChatRequest("m", TWO_CALLS + [Message("user", "ok")],
                                                                reasoning=False))
    assert "<|assistant|></think>Checking both.<tool_call>" in glm47 and glm47.endswith("</think>")
    assert GlmXml("glm47").render_tool_call("get_time", "{}") == "<tool_call>get_time</tool_call>"
    assert GlmXml("glm45").render_tool_call("get_time", "") == "<tool_call>get_time\n</tool_call>"
    block = GlmChatFormat(GlmXml("glm47")).render(ChatRequest("m", ONE_CALL[:1], tools=TOOLS))
    assert '{"type": "function", "function": {"name": "web__search", "description": "Search ü"' in block


@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts.filter(lambda t: t.strip())))
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=draw(calls()))


CUTS = st.lists(st.lists(st.integers(0, 500), max_size=6), min_size=1, max_size=3)


@pytest.mark.parametrize("variant", ["glm45", "glm47"])
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cut_lists=CUTS)
def test_round_trip_and_random_splits(variant, message, cut_lists):
    dialect = GlmXml(variant)
    text = dialect.assistant_body(message)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, cut_lists,
                             message.content.strip())
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again) == text
    assert [c.arguments for c in again.tool_calls] == [c.arguments for c in message.tool_calls]


@settings(max_examples=40, deadline=None)
@given(message=messages())
def test_every_split_position(message):
    dialect = GlmXml("glm45")
    text = dialect.assistant_body(message)
    check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text,
                    [[i] for i in range(1, len(text))], message.content.strip())


def parse(text, variant="glm47"):
    return merge(feed(GlmXml(variant).new_parser(TOOLS, call_id), [text]))


def test_schema_types_values():
    text = "<tool_call>get_weather<arg_key>zip</arg_key><arg_value>2</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
    assert parse(text)[-1] == ToolCallEnd(0, '{"zip": "2", "days": 2}')
    assert GlmXml("glm47").render_tool_call("get_weather", '{"zip": "2", "days": 2}') == text


def test_both_newline_styles_and_zero_arguments():
    for text in ["<tool_call>get_weather\n</tool_call>", "<tool_call>get_weather</tool_call>"]:
        events = parse(text, "glm45")
        assert events[0] == ToolCallStart(0, call_id(0, "get_weather"), "get_weather")
        assert events[-1] == ToolCallEnd(0, "{}") and len(events) == 3


def test_duplicate_unknown_and_unclosed():
    dup = parse("<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</arg_value>"
                "<arg_key>city</arg_key><arg_value>b</arg_value></tool_call>")
    assert [i.message for i in issues(dup)] == ["duplicate parameter 'city'"]
    assert dup[-1] == ToolCallEnd(0, '{"city": "a"}')
    unknown = parse("<tool_call>nope<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>after")
    assert "unknown tool 'nope'" in issues(unknown)[0].message and unknown[-1].text == "after"
    unclosed = parse("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par")
    assert issues(unclosed)[0].message == "unclosed tool call"
    assert not any(isinstance(e, ToolCallEnd) for e in unclosed)  # started, never ended
    assert WEATHER.name == "get_weather"

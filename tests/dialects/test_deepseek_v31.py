"""DeepSeek V3.1 and R1: reference goldens (reference/dialects.md A.1 / A.2), render -> parse -> render
identity, every split, tool results and thinking prompts."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import TOOLS, call_id, calls, check_streaming, feed, issues, merge, rebuild, texts
from kvgate.core.types import ChatRequest, Message, ToolCall, ToolCallEnd
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.deepseek_v31 import format_factory

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
PARIS, ROME = '{"city": "Paris"}', '{"city": "Rome", "days": 3, "opts": {"unit": "C"}}'
ONE = [Message("system", "You are helpful."), Message("user", "Weather in Paris?"),
       Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
       Message("tool", '{"temp": 21}', tool_call_id="a")]
TWO = [Message("system", "You are helpful."), Message("user", "Weather in Paris?"),
       Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", PARIS), ToolCall("b", "get_weather", ROME)]),
       Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]
GOLDENS = {
    ("v31", "one"): BOS + 'You are helpful.<｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜>',
    ("v31", "two"): BOS + 'You are helpful.<｜User｜>Weather in Paris?<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Rome", "days": 3, "opts": {"unit": "C"}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁output▁begin｜>rainy<｜tool▁output▁end｜>',
    ("r1", "two"): BOS + 'You are helpful.<｜User｜>Weather in Paris?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Rome", "days": 3, "opts": {"unit": "C"}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁output▁begin｜>rainy<｜tool▁output▁end｜><｜tool▁outputs▁end｜>',
}


@pytest.mark.parametrize("variant,conv", sorted(GOLDENS))
def test_reference_goldens(variant, conv):
    prompt = format_factory(variant)().render(ChatRequest("m", ONE if conv == "one" else TWO))
    assert prompt == GOLDENS[(variant, conv)]


def test_answers_after_results_and_generation_prompts():
    answer = TWO + [Message("assistant", "It is 21C."), Message("user", "Thanks")]
    r1 = format_factory("r1")().render(ChatRequest("m", answer))
    assert "<｜tool▁output▁end｜><｜tool▁outputs▁end｜>It is 21C." + EOS + "<｜User｜>Thanks<｜Assistant｜>" in r1
    v31 = format_factory("v31")().render(ChatRequest("m", answer, reasoning=True))
    assert "<｜tool▁output▁end｜>It is 21C." + EOS + "<｜User｜>Thanks<｜Assistant｜><think>" in v31
    assert v31.endswith("<think>") and format_factory("v31")().parser_start(ChatRequest("m", answer, reasoning=True)) == "reasoning"
    plain = format_factory("v31")().render(ChatRequest("m", ONE[:2]))
    assert plain.endswith("<｜User｜>Weather in Paris?<｜Assistant｜></think>")
    tools = format_factory("v31")().render(ChatRequest("m", ONE[:2], tools=TOOLS))
    assert tools.startswith(BOS + "You are helpful.\n\n## Tools\nYou have access to the following tools:\n\n"
                            "### get_weather\nDescription: Get the weather\n\nParameters: {")
    assert "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments" in tools


def test_tool_section_as_published_renderings_write_it():
    """The V3.1 model card's tool section, byte for byte as two published renderings of a V3.1
    prompt with tools write it (a blank line after ``Where:``, a newline before ``<｜User｜>``)."""
    from kvgate.core.types import Tool

    tool = Tool("run_python", "Run Python 3", {"type": "object", "properties": {"code": {"type": "string"}},
                                               "required": ["code"]})
    prompt = format_factory("v31")().render(ChatRequest("m", [Message("system", "Be exact."),
                                                              Message("user", "Sum 1..10")], tools=[tool]))
    assert prompt == (
        BOS + "Be exact.\n\n## Tools\nYou have access to the following tools:\n\n### run_python\n"
        'Description: Run Python 3\n\nParameters: {"type": "object", "properties": {"code": {"type": "string"}}, '
        '"required": ["code"]}\n\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n'
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
        "{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
        "- `tool_call_name` must be an exact match to one of the available tools\n"
        "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
        "- For multiple tool calls, chain them directly without separators or spaces\n"
        "<｜User｜>Sum 1..10<｜Assistant｜></think>")


@pytest.mark.parametrize("variant", ["v31", "r1"])
def test_reasoning_before_calls(variant):
    dialect = DeepseekV31(variant)
    text = "Two lookups.</think>Checking." + dialect.render_calls([ToolCall("a", "get_weather", PARIS)]) + EOS
    message = rebuild(merge(feed(dialect.new_parser(TOOLS, call_id, start_in="reasoning"), [text])))
    assert message.reasoning == "Two lookups." and message.content == "Checking."
    assert [c.arguments for c in message.tool_calls] == [PARIS]


def parse(text, variant="v31"):
    return merge(feed(DeepseekV31(variant).new_parser(TOOLS, call_id), [text]))


def test_bad_arguments_unknown_tool_and_unclosed():
    bad = parse("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": <｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    assert [i.message for i in issues(bad)] == ["tool call arguments are not a JSON object"]
    assert not any(isinstance(e, ToolCallEnd) for e in bad)  # started, never ended
    unknown = parse("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>after")
    assert "unknown tool 'nope'" in issues(unknown)[0].message and unknown[-1].text == "after"
    unclosed = parse("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"ci", "r1")
    assert issues(unclosed)[0].message == "unclosed tool call" and not any(isinstance(e, ToolCallEnd) for e in unclosed)


@st.composite
def messages(draw):
    return Message("assistant", draw(texts), tool_calls=draw(calls()))


CUTS = st.lists(st.lists(st.integers(0, 500), max_size=6), min_size=1, max_size=3)


@pytest.mark.parametrize("variant", ["v31", "r1"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cut_lists=CUTS)
def test_round_trip_and_random_splits(variant, message, cut_lists):
    dialect = DeepseekV31(variant)
    text = dialect.assistant_body(message)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again) == text and again.content == message.content


@pytest.mark.parametrize("variant", ["v31", "r1"])
@settings(max_examples=30, deadline=None)
@given(message=messages())
def test_every_split_position(variant, message):
    dialect = DeepseekV31(variant)
    text = dialect.assistant_body(message)
    check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, [[i] for i in range(1, len(text))],
                    message.content)

"""ChatML JSON: render -> parse -> render identity, streaming at every split, malformed input."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import (TOOLS, call_id, calls, check_streaming, feed, issues, merge, rebuild,
                             texts)
from kvgate.core.types import Message, TextDelta, ToolCallEnd, ToolCallStart
from kvgate.dialects.chatml_json import ChatmlJson

DIALECT = ChatmlJson()


def parser(start_in="content"):
    return lambda: DIALECT.new_parser(TOOLS, call_id, start_in=start_in)


@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts.filter(bool)))
    spacing = draw(st.sampled_from([None, (",", ":"), (", ", ": ")]))
    found = draw(calls())
    if spacing:
        for call in found:
            call.arguments = json.dumps(json.loads(call.arguments), separators=spacing, ensure_ascii=False)
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=found)


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.lists(st.lists(st.integers(0, 400), max_size=6), min_size=1, max_size=3))
def test_round_trip_and_random_splits(message, cut_lists):
    text = DIALECT.assistant_content(message)
    events = check_streaming(parser(), text, cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert DIALECT.assistant_content(again) == text
    assert [(c.name, c.namespace, c.arguments) for c in again.tool_calls] == \
        [(c.name, c.namespace, c.arguments) for c in message.tool_calls]


@settings(max_examples=60, deadline=None)
@given(messages())
def test_every_split_position(message):
    text = DIALECT.assistant_content(message)
    check_streaming(parser(), text, [[i] for i in range(1, len(text))], message.content)


def test_namespaced_tool_maps_back():
    text = '<tool_call>\n{"name": "web__search", "arguments": {"q": "x"}}\n</tool_call>'
    events = merge(feed(parser()(), [text]))
    assert events[0] == ToolCallStart(0, call_id(0, "web__search"), "search", "web")
    assert events[-1] == ToolCallEnd(0, '{"q": "x"}')


def test_lenient_forms():
    text = 'Hi<tool_call> {"name":"get_weather","arguments":"{\\"city\\": \\"P\\"}"} '
    events = merge(feed(parser()(), [text]))
    assert [i.message for i in issues(events)] == ["arguments written as a JSON string holding the object"]
    assert events[-1] == ToolCallEnd(0, '{"city": "P"}')


def test_unknown_tool_is_reported_not_dropped():
    text = 'ok<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    events = feed(parser()(), [text])
    found = issues(events)
    assert len(found) == 1 and "rm_rf" in found[0].message and "rm_rf" in found[0].raw
    assert not [e for e in events if isinstance(e, ToolCallStart)]


def test_malformed_and_unclosed_arguments():
    bad = feed(parser()(), ['<tool_call>\n{"name": "get_weather", "arguments": {"a": tru}}\n</tool_call>'])
    assert issues(bad) and not [e for e in bad if isinstance(e, ToolCallEnd)]  # started, never ended
    unclosed = feed(parser()(), ['<tool_call>\n{"name": "get_weather", "arguments": {"a": "x'])
    assert any("unclosed" in i.message for i in issues(unclosed))
    assert not [e for e in unclosed if isinstance(e, ToolCallEnd)]


def test_partial_tag_held_then_released_as_text():
    p = parser()()
    assert merge(p.feed("2 <tool")) == [TextDelta("2 ")]
    assert "".join(e.text for e in p.feed("s are fun\n")) == "<tools are fun"
    assert "".join(e.text for e in p.finish()) == "\n"


def test_reasoning_start_and_tools_block_in_system():
    events = merge(feed(parser("reasoning")(), ["plan\n</think>\n\nDone."]))
    assert [type(e).__name__ for e in events] == ["ReasoningDelta", "TextDelta"]
    turns = DIALECT.render_messages([Message("user", "hi")], TOOLS, None)
    assert turns[0]["role"] == "system" and turns[0]["content"].startswith("# Tools\n\n")
    assert '"name": "web__search"' in turns[0]["content"]


def test_string_arguments_issue_keeps_the_raw_text_once():
    """Arguments written as a JSON string that is not JSON (a finding of issue 19 on the peers' parser
    cases): the ParseIssue's raw text is what the model wrote, the string value not repeated."""
    from dialect_helpers import TOOLS, call_id, feed, issues, merge
    from kvgate.dialects.chatml_json import ChatmlJson

    text = '<tool_call>\n{"name": "get_weather", "arguments": "hello"}\n</tool_call>'
    events = merge(feed(ChatmlJson().new_parser(TOOLS, call_id), [text]))
    assert [i.raw for i in issues(events)] == [text]

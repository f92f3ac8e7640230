"""Kimi K2: prompt layout (the whole-prompt format and the model's own template), call ids counted
over the conversation, render -> parse -> render identity, every split."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import TOOLS, call_id, calls, check_streaming, feed, issues, merge, rebuild, texts
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolCallEnd
from kvgate.dialects.kimi_k2 import format_factory
from kvgate.dialects.kimi_k2.dialect import KimiK2, call_name

PARIS, ROME = '{"city": "Paris"}', '{"city": "Rome", "days": 3}'
TOOL = Tool("get_weather", "Get the weather", {"type": "object", "properties": {"city": {"type": "string"}}})
HISTORY = [Message("user", "Paris and Rome?"),
           Message("assistant", "Checking both.", reasoning="two calls", tool_calls=[
               ToolCall("a", "get_weather", PARIS), ToolCall("b", "get_weather", ROME)]),
           Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]
S, U, A, M, E = "<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"
CALLS = ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
         '{"city": "Paris"}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>'
         '{"city": "Rome", "days": 3}<|tool_call_end|><|tool_calls_section_end|>')
GOLDEN_THINKING = (
    S + 'tool_declare' + M + '[{"type":"function","function":{"name":"get_weather","description":"Get the weather",'
    '"parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]' + E
    + S + "system" + M + "You are Kimi, an AI assistant created by Moonshot AI." + E
    + U + "user" + M + "Paris and Rome?" + E + A + "assistant" + M + "<think>two calls</think>Checking both." + CALLS + E
    + S + "tool" + M + "## Return of functions.get_weather:0\nsunny" + E
    + S + "tool" + M + "## Return of functions.get_weather:1\nrainy" + E + A + "assistant" + M)


def test_prompt_layout_thinking():
    prompt = format_factory(None, KimiK2("thinking")).render(ChatRequest("m", HISTORY, tools=[TOOL]))
    assert prompt == GOLDEN_THINKING


def test_instruct_one_call_and_later_turns():
    one = [Message("system", "Be brief."), Message("user", "Paris?"),
           Message("assistant", "", tool_calls=[ToolCall("functions.get_weather:0", "get_weather", PARIS)]),
           Message("tool", "sunny", tool_call_id="functions.get_weather:0"), Message("assistant", "Sunny."),
           Message("user", "Rome?"), Message("assistant", "", tool_calls=[ToolCall("x9", "get_weather", ROME)])]
    prompt = format_factory(None, KimiK2("instruct")).render(ChatRequest("m", one))
    assert prompt.startswith(S + "system" + M + "Be brief." + E + U + "user" + M + "Paris?" + E + A + "assistant" + M
                             + "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0")
    assert "## Return of functions.get_weather:0\nsunny" + E + A + "assistant" + M + "Sunny." + E in prompt
    assert "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>" + ROME in prompt
    thinking = format_factory(None, KimiK2("thinking")).render(ChatRequest("m", one[:5] + [HISTORY[1]]))
    assert thinking.count("<think></think>") == 2 and "<think>two calls</think>" in thinking


# A template of our own in the layout of Kimi's published ones: it declares the tools itself (with
# tojson's separators argument), adds the default system turn and writes "## Return of" + the id.
KIMI_STYLE_TEMPLATE = (
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>"
    "{%- endif -%}{%- for m in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}<|im_system|>system<|im_middle|>"
    "You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>{%- endif -%}"
    "{%- if m['role'] == 'user' -%}<|im_user|>user<|im_middle|>{%- elif m['role'] == 'assistant' -%}"
    "<|im_assistant|>assistant<|im_middle|>{%- else -%}<|im_system|>{{ m['role'] }}<|im_middle|>{%- endif -%}"
    "{%- if m['role'] == 'tool' -%}## Return of {{ m.tool_call_id }}\n{{ m['content'] }}"
    "{%- else -%}{{ m['content'] }}{%- endif -%}<|im_end|>{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}")


def test_the_models_own_template_declares_the_tools_and_writes_the_results():
    """Served on the defaults, a Kimi checkpoint's own template renders the prompt: it must get the
    tools as its ``tools`` variable and the results' ids, and write each thing exactly once."""
    from kvgate.plugins.jinja_chat_format import JinjaChatFormat

    request = ChatRequest("m", HISTORY, tools=[TOOL])
    prompt = JinjaChatFormat(KIMI_STYLE_TEMPLATE, KimiK2("thinking"), {}).render(request)
    assert prompt == GOLDEN_THINKING
    assert prompt.count("tool_declare") == 1 and prompt.count("## Return of") == 2
    no_tools = JinjaChatFormat(KIMI_STYLE_TEMPLATE, KimiK2("thinking"), {}).render(ChatRequest("m", HISTORY))
    assert "tool_declare" not in no_tools and no_tools == GOLDEN_THINKING[GOLDEN_THINKING.index(S + "system"):]


def test_call_names():
    assert call_name("functions.get_weather:12") == "get_weather"
    assert call_name(" web__search:0 ") == "web__search" and call_name("get_time") == "get_time"


def parse(text):
    return merge(feed(KimiK2().new_parser(TOOLS, call_id), [text]))


def test_bad_arguments_unknown_tool_and_unclosed():
    head = "<|tool_calls_section_begin|><|tool_call_begin|>"
    bad = parse(head + 'functions.get_weather:0<|tool_call_argument_begin|>{"city"<|tool_call_end|><|tool_calls_section_end|>')
    assert [i.message for i in issues(bad)] == ["tool call arguments are not a JSON object"]
    assert not any(isinstance(e, ToolCallEnd) for e in bad)  # started, never ended
    unknown = parse(head + "functions.nope:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>ok")
    assert "unknown tool 'nope'" in issues(unknown)[0].message and unknown[-1].text == "ok"
    unclosed = parse(head + 'functions.get_weather:0<|tool_call_argument_begin|>{"c')
    assert issues(unclosed)[0].message == "unclosed tool call" and not any(isinstance(e, ToolCallEnd) for e in unclosed)


@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts))
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=draw(calls()))


CUTS = st.lists(st.lists(st.integers(0, 500), max_size=6), min_size=1, max_size=3)


@pytest.mark.parametrize("variant", ["instruct", "thinking"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), first=st.integers(0, 30), cut_lists=CUTS)
def test_round_trip_and_random_splits(variant, message, first, cut_lists):
    dialect = KimiK2(variant)
    text = dialect.assistant_body(message, first)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again, first) == text


@settings(max_examples=30, deadline=None)
@given(message=messages())
def test_every_split_position(message):
    dialect = KimiK2("thinking")
    text = dialect.assistant_body(message)
    check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, [[i] for i in range(1, len(text))],
                    message.content)

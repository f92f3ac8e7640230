"""MiniMax M2: byte-exact against the official chat template rendered by transformers (one call with
tools; two calls with reasoning and content), through kvgate's own Jinja path and its Python chat
format; render -> parse -> render identity at random and at every split; malformed output; the
fence in every mode on SmolLM2's tokenizer."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from dialect_helpers import (TOOLS, call_id, calls, check_streaming, every_split, feed, issues, merge,
                             rebuild, texts)
from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.types import ChatRequest, Message, TextDelta, Tool, ToolCall, ToolCallEnd, ToolCallStart
from kvgate.dialects.minimax_m2 import MinimaxChatFormat, MinimaxM2
# the fence fixtures (drive needs the others)
from tests.core.fence.conftest import (CLOCK, WEATHER, args, config, drive, pm, request,  # noqa: F401
                                  smol_info, smol_tokenizer)

# MiniMax-M2's chat_template.jinja as llama.cpp carries it (models/templates/MiniMax-M2.jinja)
TEMPLATE = (Path(__file__).parent / "templates" / "minimax_m2.jinja").read_text(encoding="utf-8")
GET_WEATHER = Tool("get_weather", "Get the weather ü", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "opts": {"type": "object"}}, "required": ["city"]})
ONE_CALL = [Message("system", "Be brief."), Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
            Message("tool", '{"temp": 21}', tool_call_id="a")]
TWO_CALLS = [Message("user", "Paris and Rome?"),
             Message("assistant", "Checking both.", reasoning="need two calls", tool_calls=[
                 ToolCall("a", "get_weather", '{"city": "Paris"}'),
                 ToolCall("b", "get_weather", '{"city": "Rome", "days": 3, "opts": {"unit": "C"}}')]),
             Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]


def openai_messages(messages: list[Message]) -> list[dict]:
    """The conversation as an OpenAI client sends it (arguments decoded, reasoning_content)."""
    out = []
    for m in messages:
        item = {"role": m.role, "content": m.content}
        if m.reasoning:
            item["reasoning_content"] = m.reasoning
        if m.tool_calls:
            item["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": json.loads(c.arguments)}} for c in m.tool_calls]
        out.append(item)
    return out


def official(messages, tools) -> str:
    listed = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                "parameters": t.parameters}} for t in tools]
    rendered, _ = render_jinja_template(conversations=[openai_messages(messages)], tools=listed or None,
                                        chat_template=TEMPLATE, add_generation_prompt=True)
    return rendered[0]


@pytest.mark.parametrize("messages,tools", [(ONE_CALL, [GET_WEATHER]), (TWO_CALLS, [GET_WEATHER]),
                                            (TWO_CALLS + [Message("user", "and Oslo?")], [])],
                         ids=["one-call-tools", "two-calls-reasoning", "no-tools-after-user"])
def test_byte_exact_against_the_official_template(messages, tools):
    expected = official(messages, tools)
    req = ChatRequest("m", messages, tools=tools)
    assert MinimaxChatFormat().render(req) == expected
    assert JinjaChatFormat(TEMPLATE, MinimaxM2(), {}).render(req) == expected


def test_reference_bytes_of_the_two_call_turn():
    text = MinimaxChatFormat().render(ChatRequest("m", TWO_CALLS, tools=[GET_WEATHER]))
    assert (']~b]user\nParis and Rome?[e~[\n]~b]ai\n<think>\nneed two calls\n</think>\n\nChecking both.'
            '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
            '</invoke>\n<invoke name="get_weather">\n<parameter name="city">Rome</parameter>\n'
            '<parameter name="days">3</parameter>\n<parameter name="opts">{"unit": "C"}</parameter>\n'
            '</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>sunny</response>\n'
            '<response>rainy</response>[e~[\n]~b]ai\n<think>\n') in text
    assert '<tool>{"name": "get_weather", "description": "Get the weather ü", "parameters"' in text
    assert MinimaxChatFormat().parser_start(ChatRequest("m", TWO_CALLS)) == "reasoning"


def test_a_generated_turn_parses_back_to_the_official_rendering():
    """The completion after the generation prompt, parsed, renders byte for byte as the template does."""
    dialect = MinimaxM2()
    prompt = MinimaxChatFormat().render(ChatRequest("m", TWO_CALLS[:1], tools=[GET_WEATHER]))
    body = dialect.assistant_body(TWO_CALLS[1], True)
    assert body.startswith("<think>\n")
    completion = body[len("<think>\n"):]
    events = every_split(lambda: dialect.new_parser([GET_WEATHER], call_id, start_in="reasoning"), completion,
                         "Checking both.")
    assert not issues(events)
    again = rebuild(events)
    assert (again.reasoning, again.content) == ("need two calls", "Checking both.")
    history = TWO_CALLS[:1] + [again] + TWO_CALLS[2:]
    assert official(history, [GET_WEATHER]) == official(TWO_CALLS, [GET_WEATHER])
    assert prompt + completion + "[e~[\n" in official(TWO_CALLS, [GET_WEATHER])


def test_dialect_choice_and_registration():
    assert MinimaxM2.serves("MiniMaxM2ForCausalLM", "") > MinimaxM2.serves("x", TEMPLATE) > 0
    assert MinimaxM2.serves("LlamaForCausalLM", "") == 0
    assert MinimaxM2().chat_format_without_template() == "minimax_m2"
    with pytest.raises(ValueError):
        MinimaxM2("m3")
    from kvgate.core.plugins import build_plugin_manager, collect

    plugins = build_plugin_manager()
    assert collect(plugins, "register_dialects", "dialect").get("minimax_m2")().name == "minimax_m2"
    assert collect(plugins, "register_chat_formats", "chat format").get("minimax_m2")(None, None).name == "minimax_m2"


# ---- render -> parse -> render, streaming

@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts.filter(lambda t: t.strip("\n") == t and t)))
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=draw(calls()))


def body_and_start(dialect, message, thinking):
    body = dialect.assistant_body(message, thinking)
    if thinking and message.reasoning:
        return body[len("<think>\n"):], "reasoning"
    return body, "content"


CUTS = st.lists(st.lists(st.integers(0, 800), max_size=6), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cut_lists=CUTS, thinking=st.booleans())
def test_round_trip_and_random_splits(message, cut_lists, thinking):
    dialect = MinimaxM2()
    text, start = body_and_start(dialect, message, thinking)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id, start_in=start), text, cut_lists,
                             message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again, thinking) == dialect.assistant_body(message, thinking)
    assert [json.loads(c.arguments) for c in again.tool_calls] == [json.loads(c.arguments) for c in message.tool_calls]


@settings(max_examples=30, deadline=None)
@given(message=messages())
def test_every_split_position(message):
    dialect = MinimaxM2()
    text, start = body_and_start(dialect, message, True)
    every_split(lambda: dialect.new_parser(TOOLS, call_id, start_in=start), text, message.content)


def parse(text, tools=TOOLS, start="content"):
    return merge(feed(MinimaxM2().new_parser(tools, call_id, start_in=start), [text]))


def test_values_are_typed_by_the_schema():
    events = parse('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="zip">03106</parameter>\n'
                   '<parameter name="days">7</parameter>\n<parameter name="city"> a\n<b> </parameter>\n'
                   '<parameter name="flag">true</parameter>\n<parameter name="tags">not json</parameter>\n'
                   '</invoke>\n</minimax:tool_call>')
    end = [e for e in events if isinstance(e, ToolCallEnd)]
    assert json.loads(end[0].arguments) == {"zip": "03106", "days": 7, "city": " a\n<b> ", "flag": True,
                                            "tags": "not json"}


def test_malformed_unknown_duplicate_and_unclosed():
    dup = parse('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">a</parameter>\n'
                '<parameter name="city">b</parameter>\n</invoke>\n</minimax:tool_call>')
    assert [i.message for i in issues(dup)] == ["duplicate parameter 'city'"]
    assert [e for e in dup if isinstance(e, ToolCallEnd)][0].arguments == '{"city": "a"}'
    unknown = parse('<minimax:tool_call>\n<invoke name="nope">\n</invoke>\n</minimax:tool_call>')
    assert "unknown tool 'nope'" in issues(unknown)[0].message
    assert not any(isinstance(e, ToolCallStart) for e in unknown)
    unclosed = parse('Hi<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Par')
    assert issues(unclosed)[0].message == "unclosed tool call"
    assert not any(isinstance(e, ToolCallEnd) for e in unclosed)
    open_block = parse('<minimax:tool_call>\n<invoke name="get_weather">\n</invoke>\n')
    assert [e for e in open_block if isinstance(e, ToolCallEnd)][0].arguments == "{}"
    assert "unclosed <minimax:tool_call> block" in issues(open_block)[-1].message
    junk = parse('<minimax:tool_call>\nnot an invoke</minimax:tool_call>after')
    assert "expected an invoke" in issues(junk)[0].message
    assert "".join(e.text for e in junk if isinstance(e, TextDelta)) == "after"


# ---- the fence (SmolLM2's tokenizer: every tag is plain text)

def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


def calls_text(*items: tuple[str, str]) -> str:
    return MinimaxM2().render_calls([ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(items)])


def test_fence_required_named_auto_and_parallel(drive):
    dialect = MinimaxM2()
    one = calls_text(("get_weather", args(city="Paris <b>", days=3)))
    assert drive(dialect, request("required")).accepts(one)
    assert drive(dialect, request("named", name="get_weather")).accepts(one)
    assert rejected(drive(dialect, request("named", name="get_time")), one)
    two = calls_text(("get_weather", args(city="x", days=1)), ("get_time", args(tz="UTC")))
    assert drive(dialect, request("required")).accepts(two)
    assert rejected(drive(dialect, request("required", parallel=False)), two)
    assert drive(dialect, request("auto")).accepts("Just an answer.")
    assert drive(dialect, request("auto")).accepts("Checking." + calls_text(("get_time", args(tz="UTC"))))
    assert drive(dialect, request("none")).accepts("Plain text only.")
    assert rejected(drive(dialect, request("none")), "x" + calls_text(("get_time", args(tz="UTC"))))


def test_fence_types_values_and_keeps_markup_out_of_them(drive):
    dialect = MinimaxM2()
    for bad in ('{"city": "x", "days": 2}', '{"city": "x", "days": "three"}', '{"days": 3}'):
        assert rejected(drive(dialect, request("required")), calls_text(("get_weather", bad)))
    head = '<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="tz">'
    for value in ("a</invoke>", 'b<parameter name="x">', "c</minimax:tool_call>"):
        assert rejected(drive(dialect, request("required")), head + value)


def test_fence_reasoning_first(drive):
    dialect = MinimaxM2()
    text = "thinking hard\n</think>\n\n" + calls_text(("get_time", args(tz="UTC")))
    assert drive(dialect, request("required"), start_in="reasoning").accepts(text)
    assert rejected(drive(dialect, request("required"), start_in="reasoning"),
                    "thinking\n</think>\n\nno call")


# ---- on the real engine and model: fenced output parses into valid calls, speculation changes nothing

@pytest.mark.slow
@pytest.mark.parametrize("mode,name", [("required", None), ("named", "get_time")])
def test_fenced_calls_are_valid_with_and_without_speculation(smollm2_runtime, pm, mode, name):  # noqa: F811
    from bench.fence_check import check_calls
    from kvgate.core.types import SamplingParams, ToolChoice
    from tests.core.fence.engine_run import plain_and_speculative

    runtime, dialect = smollm2_runtime, MinimaxM2()
    req = ChatRequest(model="m", messages=[Message("user", "Weather in Paris for 3 days, and the time?")],
                      tools=[WEATHER, CLOCK], tool_choice=ToolChoice(mode, name),
                      sampling=SamplingParams(temperature=0.0), parallel_tool_calls=False)
    without, with_spec, done = plain_and_speculative(runtime, dialect, req, pm, 120)
    text = runtime.tokenizer.decode(without, skip_special_tokens=False)
    assert with_spec == without, (text, runtime.tokenizer.decode(with_spec))
    verdict = check_calls(dialect, req.tools, text)
    assert verdict.ok, (verdict.problems, text)
    if mode != "auto":
        assert done.reason != "length" and verdict.calls, text
    if mode == "named":
        assert {n for n, _ in verdict.calls} == {"get_time"}

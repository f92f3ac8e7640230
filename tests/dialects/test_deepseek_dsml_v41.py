"""DeepSeek V4.1 spaced DSML (``v41``) and the tolerant reading of leaked DSML spellings: ASCII bars,
spaces inside the markers, an invoke without its block. Each is read into completed calls with a
ParseIssue, never passed through as text, at every split; the fence still refuses them."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect_helpers import (TOOLS, call_id, calls, check_streaming, every_split, feed, issues, merge,
                             rebuild, texts)
from kvgate.core.types import Message, TextDelta, Tool, ToolCall, ToolCallEnd, ToolCallStart
from kvgate.dialects.deepseek_dsml import DeepseekDsml
# the fence fixtures (drive needs the others)
from tests.core.fence.conftest import args, config, drive, pm, request, smol_info, smol_tokenizer  # noqa: F401

# smg-project/smg crates/tool_parser/tests/tool_parser_deepseek_v41.rs (TWO_CALLS), from V4.1's encoder
SMG_TWO_CALLS = (
    'Checking.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="city" '
    'string="true">杭州</｜DSML｜ parameter>\n<｜DSML｜ parameter name="count" string="false">42</｜DSML｜ '
    'parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="x" '
    'string="false">1.5</｜DSML｜ parameter>\n<｜DSML｜ parameter name="y" string="false">2.25</｜DSML｜ '
    'parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>')
ANY = Tool("get_weather", "", {"type": "object"})


def parse(text, variant="v41", tools=TOOLS):
    return merge(feed(DeepseekDsml(variant).new_parser(tools, call_id), [text]))


def ended(events) -> list[dict]:
    return [json.loads(e.arguments) for e in events if isinstance(e, ToolCallEnd)]


def content(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_v41_renders_the_reference_block_and_reads_it_back():
    dialect = DeepseekDsml("v41")
    message = Message("assistant", "Checking.", tool_calls=[
        ToolCall("a", "get_weather", '{"city": "杭州", "count": 42}'),
        ToolCall("b", "get_weather", '{"x": 1.5, "y": 2.25}')])
    assert dialect.assistant_body(message, False) == SMG_TWO_CALLS + "<｜end▁of▁sentence｜>"
    events = every_split(lambda: dialect.new_parser([ANY], call_id), SMG_TWO_CALLS, "Checking.")
    assert not issues(events) and content(events) == "Checking."
    assert [e.arguments for e in events if isinstance(e, ToolCallEnd)] == [
        '{"city": "杭州", "count": 42}', '{"x": 1.5, "y": 2.25}']


def test_v41_is_chosen_for_v41_architectures_and_names_no_chat_format():
    assert DeepseekDsml.variant_for("DeepseekV41ForCausalLM", "") == "v41"
    assert DeepseekDsml.variant_for("deepseek_v4.1", "") == "v41"
    assert DeepseekDsml.variant_for("DeepseekV4ForCausalLM", "") == "v4"
    assert DeepseekDsml("v41").chat_format_without_template() == ""
    assert DeepseekDsml("v41").literals["block_open"] == "\n\n<｜DSML｜ calls>\n"
    with pytest.raises(ValueError):
        DeepseekDsml("v5")


@st.composite
def messages(draw):
    reasoning = draw(st.one_of(st.none(), texts))
    return Message("assistant", draw(texts), reasoning=reasoning, tool_calls=draw(calls()))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=messages(), cuts=st.lists(st.lists(st.integers(0, 800), max_size=6), min_size=1, max_size=3),
       thinking=st.booleans())
def test_v41_round_trip_and_random_splits(message, cuts, thinking):
    dialect = DeepseekDsml("v41")
    text = dialect.assistant_body(message, thinking)
    start = "reasoning" if thinking else "content"
    events = check_streaming(lambda: dialect.new_parser(TOOLS, call_id, start_in=start), text, cuts,
                             message.content)
    assert not issues(events)
    assert dialect.assistant_body(rebuild(events), thinking) == text


@settings(max_examples=25, deadline=None)
@given(message=messages())
def test_v41_every_split_position(message):
    dialect = DeepseekDsml("v41")
    text = dialect.assistant_body(message, False)
    every_split(lambda: dialect.new_parser(TOOLS, call_id), text, message.content)


# ---- leaked spellings

def block(d: str, name: str = "tool_calls", close: str = "") -> str:
    close = close or d
    return (f'\n\n<{d}{name}>\n<{d}invoke name="get_weather">\n<{d}parameter name="city" string="true">Paris'
            f'</{close}parameter>\n<{d}parameter name="days" string="false">2</{close}parameter>\n'
            f'</{close}invoke>\n</{close}{name}>')


LEAKS = {
    "ascii bars": block("|DSML|"),
    "doubled bars": block("||DSML||"),
    "spaces around the bars": block("｜ DSML ｜ ").replace("<", "< ").replace("< /", "</ "),
    "spaced (v41) tags in v4": block("｜DSML｜ "),
    "v32 block name in v4": block("｜DSML｜", "function_calls"),
    "mixed spellings": block("|DSML|", close="｜DSML｜"),
}


@pytest.mark.parametrize("leak", list(LEAKS), ids=list(LEAKS))
def test_leaked_spellings_are_read_as_calls_and_reported(leak):
    text = "Looking." + LEAKS[leak] + "<｜end▁of▁sentence｜>"
    events = every_split(lambda: DeepseekDsml("v4").new_parser(TOOLS, call_id), text, "Looking.")
    assert content(events) == "Looking."
    assert ended(events) == [{"city": "Paris", "days": 2}]
    found = [i.message for i in issues(events)]
    assert found and all(m.startswith("DSML marker ") and " read as '<" in m for m in found), found
    assert "DSML" not in content(events)


def test_an_invoke_without_its_block_is_a_call():
    d = "｜DSML｜"
    invoke = (f'<{d}invoke name="get_weather">\n<{d}parameter name="city" string="true">Oslo</{d}parameter>\n'
              f'</{d}invoke>')
    text = "Sure.\n\n" + invoke + "\n" + invoke.replace("Oslo", "Rome") + "\nDone."
    events = every_split(lambda: DeepseekDsml("v4").new_parser(TOOLS, call_id), text, "Sure.\nDone.")
    assert ended(events) == [{"city": "Oslo"}, {"city": "Rome"}]
    assert content(events) == "Sure.\nDone."
    assert [i.message for i in issues(events)] == [
        "an invoke written without its <｜DSML｜tool_calls> block read as a call"] * 2
    ascii_bare = parse("Hi " + invoke.replace("｜DSML｜", "|DSML|"), "v32")
    assert ended(ascii_bare) == [{"city": "Oslo"}] and content(ascii_bare) == "Hi "
    assert len(issues(ascii_bare)) == 5  # four markers rewritten, one block missing


def test_v4_tags_in_v41_output_are_read_and_reported():
    events = parse("ok" + block("｜DSML｜"))
    assert ended(events) == [{"city": "Paris", "days": 2}] and content(events) == "ok"
    assert "read as '<｜DSML｜ calls'" in issues(events)[0].message


def test_text_offsets_point_into_what_the_model_wrote():
    text = "A" + block("|DSML|") + "B tail"
    events = feed(DeepseekDsml("v4").new_parser(TOOLS, call_id), [text[:30], text[30:]])
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.text for d in deltas) == "AB tail"
    assert [text[d.at:d.at + len(d.text)] for d in deltas] == [d.text for d in deltas]


def test_near_misses_stay_text():
    for text in ("a <|DS b", "x < | y", "<｜DSML｜x>", "|DSML| invoke", "<b>｜DSML｜ & <｜x"):
        events = parse(text, "v4")
        assert content(events) == text and not issues(events)
        assert not any(isinstance(e, ToolCallStart) for e in events)


# ---- the fence: canonical v41 output passes, no leaked spelling can be generated

def test_v41_fence_accepts_its_calls(drive):
    dialect = DeepseekDsml("v41")
    one = dialect.render_calls([ToolCall("a", "get_weather", args(days=3, city="Paris <b>"))])
    assert drive(dialect, request("required")).accepts(one)
    assert drive(dialect, request("named", name="get_weather")).accepts(one)
    two = dialect.render_calls([ToolCall("a", "get_weather", args(city="x", days=1)),
                                ToolCall("b", "get_time", args(tz="UTC"))])
    assert drive(dialect, request("auto")).accepts("Checking." + two)
    assert drive(dialect, request("auto")).accepts("Just an answer.")
    v4 = DeepseekDsml("v4").render_calls([ToolCall("a", "get_time", args(tz="UTC"))])
    driver = drive(dialect, request("required"))
    assert driver.feed(v4) < len(driver.tokenizer.encode(v4).ids)


@pytest.mark.parametrize("variant", ["v4", "v41"])
def test_fence_refuses_leaked_spellings(drive, variant):
    dialect = DeepseekDsml(variant)
    for leak in ("Hi <|DSML|invoke", "Hi < ｜DSML｜ invoke", "Hi\n\n<｜DSML｜invoke", "x </||DSML||calls"):
        driver = drive(dialect, request("auto"))
        assert driver.feed(leak) < len(driver.tokenizer.encode(leak).ids), leak
    head = dialect.render_calls([ToolCall("a", "get_time", args(tz="UTC"))])
    head = head[: head.index(">UTC<") + 1]
    for value in ("a<|DSML|parameter", "b< ｜ DSML"):
        driver = drive(dialect, request("required"))
        assert driver.feed(head + value) < len(driver.tokenizer.encode(head + value).ids), value

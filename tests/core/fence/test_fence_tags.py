"""GLM XML and DeepSeek DSML fences: any parameter order, each at most once, required before the
call closes, raw string values without markup, typed values as JSON, the trigger banned in none."""

from __future__ import annotations

import numpy as np
import pytest

from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.glm_xml import GlmXml
from tests.core.fence.conftest import args, request

DIALECTS = [GlmXml("glm47"), GlmXml("glm45"), DeepseekDsml("v32"), DeepseekDsml("v4")]


def calls_text(dialect, *calls: tuple[str, str]) -> str:
    rendered = [dialect.render_tool_call(name, arguments) for name, arguments in calls]
    if isinstance(dialect, DeepseekDsml):
        lit = dialect.literals
        return lit["block_open"] + "\n".join(rendered) + "\n" + lit["block_close"]
    return "".join(dialect.sep + text for text in rendered)


def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: f"{d.name}-{d.variant}")
class TestTagDialects:
    def test_any_order_is_accepted(self, drive, dialect):
        text = calls_text(dialect, ("get_weather", '{"days": 3, "city": "Paris <b>", "fields": ["a"]}'))
        assert drive(dialect, request("required")).accepts(text)

    def test_parallel_calls(self, drive, dialect):
        text = calls_text(dialect, ("get_weather", args(city="x", days=1)), ("get_time", args()))
        assert drive(dialect, request("required")).accepts(text)
        assert rejected(drive(dialect, request("required", parallel=False)), text)

    def test_duplicate_parameter_is_rejected(self, drive, dialect):
        text = calls_text(dialect, ("get_weather", '{"days": 3, "days": 1, "city": "x"}'))
        assert rejected(drive(dialect, request("required")), text)

    def test_missing_required_parameter_cannot_close(self, drive, dialect):
        text = calls_text(dialect, ("get_weather", args(city="x")))
        assert rejected(drive(dialect, request("required")), text)

    def test_typed_values_follow_the_schema(self, drive, dialect):
        text = calls_text(dialect, ("get_weather", '{"city": "x", "days": 2}'))
        assert rejected(drive(dialect, request("required")), text)

    def test_markup_cannot_open_inside_a_string_value(self, drive, dialect):
        close = dialect.literals.get("call_close") or dialect.literals["invoke_close"]
        text = calls_text(dialect, ("get_weather", args(city="a" + close, days=1)))
        assert rejected(drive(dialect, request("required")), text)

    def test_auto_text_or_call(self, drive, dialect):
        assert drive(dialect, request("auto")).accepts("Just an answer.")
        text = "Checking." + calls_text(dialect, ("get_time", args(tz="UTC")))
        assert drive(dialect, request("auto")).accepts(text)

    def test_none_bans_the_trigger(self, drive, dialect):
        text = "Checking." + calls_text(dialect, ("get_time", args(tz="UTC")))
        assert rejected(drive(dialect, request("none")), text)

    def test_named_tool(self, drive, dialect):
        text = calls_text(dialect, ("get_time", args(tz="UTC")))
        assert drive(dialect, request("named", "get_time")).accepts(text)
        other = calls_text(dialect, ("get_weather", args(city="x", days=1)))
        assert rejected(drive(dialect, request("named", "get_time")), other)


def test_dsml_single_call_among_three_tools_closes_the_block(drive):
    from tests.core.fence.conftest import CLOCK, WEATHER
    from kvgate.core.types import Tool

    dialect = DeepseekDsml("v32")
    extra = Tool("search", "", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    for first in ("get_weather", "get_time", "search"):
        arguments = {"get_weather": args(city="x", days=1), "get_time": args(), "search": args(q="y")}[first]
        text = calls_text(dialect, (first, arguments))
        req = request("required", tools=(WEATHER, CLOCK, extra), parallel=False)
        driver = drive(dialect, req)
        assert driver.accepts(text) and driver.fence.must_stop


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: f"{d.name}-{d.variant}")
def test_raw_string_values_keep_enum_and_length(drive, dialect):
    from kvgate.core.types import Tool

    tool = Tool("pick", "", {"type": "object", "required": ["unit", "code"], "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "code": {"type": "string", "minLength": 2, "maxLength": 3}}})
    good = calls_text(dialect, ("pick", args(unit="celsius", code="ab")))
    assert drive(dialect, request("required", tools=(tool,))).accepts(good)
    for bad in (args(unit="kelvin", code="ab"), args(unit="celsius", code="abcd"), args(unit="celsius", code="a")):
        assert rejected(drive(dialect, request("required", tools=(tool,))), calls_text(dialect, ("pick", bad)))


@pytest.mark.parametrize("dialect", DIALECTS[2:], ids=lambda d: f"{d.name}-{d.variant}")
def test_dsml_values_cannot_open_any_tag(drive, dialect, smol_info):
    """A string value (raw) or a JSON string (string="false") may hold no ``<｜DSML｜`` / ``</｜DSML｜``,
    whole tag or not, in any token split: the bench once saw ``</｜DSML｜function_calls*>`` repeated."""
    head = calls_text(dialect, ("get_weather", args(days=1, city="x")))
    head = head[: head.index(">x<") + 1]
    for value in ("a</｜DSML｜function_calls*>", "<｜DSML｜x", "b</｜DSML｜invoke"):
        assert rejected(drive(dialect, request("required")), head + value)
    driver, text = drive(dialect, request("required")), head + "Paris <b>｜DSML｜ & <｜x"
    assert driver.feed(text) == len(driver.tokenizer.encode(text).ids)
    for byte in b"</\xef\xbd\x9cDSML\xef\xbd\x9c":  # byte by byte: the tag may only be the value's end
        driver.fence.advance(next(t for t, p in enumerate(smol_info.token_bytes()) if p == bytes([byte])))
    pieces = smol_info.token_bytes()
    allowed = np.flatnonzero(driver.fence.allowed())
    assert allowed.size and all(b"parameter>".startswith(pieces[t]) or pieces[t].startswith(b"parameter>")
                                for t in allowed)

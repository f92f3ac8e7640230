"""Gemma 4 free values (a schema that declares no structure) are fenced in Gemma's own syntax, exactly
as the template writes them back: random values go render -> parse -> render byte for byte, the
fence accepts the rendering of random values and rejects compact JSON and every other spelling the
template would not write back; on the embedded model a fenced call with free values is its own
rendering, with and without speculation."""

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dialect_helpers import call_id
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolCallEnd
from kvgate.dialects.gemma4 import Gemma4
from kvgate.dialects.gemma4.free_values import DEPTH
# the fence fixtures (drive needs the others)
from tests.core.fence.conftest import config, drive, pm, request, smol_info, smol_tokenizer  # noqa: F401

MARKUP = ('<|"|>', "<|tool_call>", "<tool_call|>", "<|tool_response>")
STORE = Tool("store", "Store data", {"type": "object", "required": ["data"], "properties": {
    "data": {}, "meta": {"type": "object", "additionalProperties": True}, "tags": {"type": "array"}}})


def clean(text: str) -> bool:
    return not any(m in text for m in MARKUP)


def canonical_float(value: float) -> bool:
    """Written by ``str`` in fixed notation within 15 digits (what the fence allows, :mod:`.numbers`)."""
    if "e" in repr(value):  # 1e-05 or 1e+16: str's exponent notation, which the fence does not write
        return False
    whole, _, fraction = repr(value).lstrip("-").partition(".")
    return len(fraction.lstrip("0")) <= 15 if whole == "0" else len(whole) + len(fraction.rstrip("0")) <= 15


# below U+40000: SmolLM2's tokenizer has no token for the bytes F1..F4 that lead the UTF-8 of the rest
texts = st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x3FFFF), max_size=12).filter(clean)
keys = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters=':<"{}[],',
                             max_codepoint=0x3FFFF), min_size=1, max_size=8)
floats = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15).filter(canonical_float)
scalars = st.one_of(texts, st.integers(-10 ** 20, 10 ** 20), floats, st.booleans(), st.none())


def values(depth: int = DEPTH + 1):
    """Containers nested ``depth`` deep at most, the deepest empty (what the fence admits)."""
    if depth == 0:
        return scalars
    inner = values(depth - 1) if depth > 1 else st.just({}) | st.just([])
    return st.one_of(scalars, st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3), inner)


def rendered(arguments: dict) -> str:
    return Gemma4().render_calls([ToolCall("c0", "store", json.dumps(arguments))])


def parsed(text: str) -> str:
    parser = Gemma4().new_parser([STORE], call_id)
    events = parser.feed(text) + parser.finish()
    return next(e.arguments for e in events if isinstance(e, ToolCallEnd))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(values(DEPTH + 3))
def test_free_values_render_parse_render_byte_for_byte(value):
    text = rendered({"data": value})
    assert json.loads(parsed(text)) == {"data": value}
    assert rendered(json.loads(parsed(text))) == text


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])  # a fence per example: shrinking would take minutes
@given(values(), st.dictionaries(keys, values(DEPTH - 1), max_size=3), st.lists(values(DEPTH - 1), max_size=3))
def test_the_fence_accepts_the_rendering_of_random_free_values(drive, config, data, meta, tags):  # noqa: F811
    config.section("guard").enabled = False  # the loop guard bans repeats such as {},{},{}
    text = rendered({"data": data, "meta": meta, "tags": tags})
    assert drive(Gemma4(), request("required", tools=(STORE,))).accepts(text), text


def rejected(driver, text: str) -> bool:
    return driver.feed(text) < len(driver.tokenizer.encode(text).ids)


@pytest.mark.parametrize("value", [
    '{"a": 1}', '{"a":1}', '["x", 2]', "null", "True", "1e5", "2.50", "0.00001", "1234567890123456.5", "-0",
    "{ a:1}", "{a: 1}", "{a:1 }", "[1, 2]", '{a:"x"}', "{:1}", "{a b:1}", "{a}b:1}", "{a:{b:{c:{d:{e:1}}}}}"])
def test_the_fence_rejects_what_the_template_would_not_write_back(drive, value):
    text = f"<|tool_call>call:store{{data:{value}}}<tool_call|>"
    assert rejected(drive(Gemma4(), request("required", tools=(STORE,))), text), value


def test_free_objects_arrays_and_refs_in_gemma_syntax(drive):
    text = '<|tool_call>call:store{data:{a_b:[{},[]],x:0.0001,Z-1:None},meta:{k:<|"|>v<|"|>},tags:[1,<|"|>t<|"|>]}<tool_call|>'
    assert drive(Gemma4(), request("required", tools=(STORE,))).accepts(text)
    assert rendered(json.loads(parsed(text))) == text
    ordered = "<|tool_call>call:store{data:{_x:1,A:2,a:3,b:4,é:5}}<tool_call|>"  # A and a: dictsort keeps their order
    assert drive(Gemma4(), request("required", tools=(STORE,))).accepts(ordered)
    assert rendered(json.loads(parsed(ordered))) == ordered
    closed = Tool("store", "", {"type": "object", "properties": {"meta": {"type": "object", "additionalProperties": False}}})
    assert rejected(drive(Gemma4(), request("required", tools=(closed,))), "<|tool_call>call:store{meta:{a:1}}")
    counts = Tool("store", "", {"type": "object", "properties": {
        "meta": {"type": "object", "additionalProperties": {"type": "integer"}}}})
    assert drive(Gemma4(), request("required", tools=(counts,))).accepts("<|tool_call>call:store{meta:{a:1,b:2}}<tool_call|>")
    assert rejected(drive(Gemma4(), request("required", tools=(counts,))), '<|tool_call>call:store{meta:{a:<|"|>')


# ---- on the real engine and model: a fenced free value is what the template writes back

@pytest.mark.slow
def test_fenced_free_values_render_back_with_and_without_speculation(smollm2_runtime, pm):  # noqa: F811
    from bench.fence_check import check_calls
    from kvgate.core.types import SamplingParams, ToolChoice
    from tests.core.fence.engine_run import plain_and_speculative

    dialect = Gemma4()
    req = ChatRequest(model="m", messages=[Message("user", "Store {'user': 'ann', 'ids': [3, 4]} with tags.")],
                      tools=[STORE], tool_choice=ToolChoice("named", "store"),
                      sampling=SamplingParams(temperature=0.0), parallel_tool_calls=False)
    without, with_spec, done = plain_and_speculative(smollm2_runtime, dialect, req, pm, 200)
    text = smollm2_runtime.tokenizer.decode(without, skip_special_tokens=False)
    assert with_spec == without, (text, smollm2_runtime.tokenizer.decode(with_spec))
    verdict = check_calls(dialect, req.tools, text)
    assert verdict.ok and len(verdict.calls) == 1 and done.reason != "length", (verdict.problems, text)
    again = rendered(json.loads(verdict.calls[0][1]))
    # the fence does not order a free object's keys (the module docstring): the bytes are the same
    # but for that order, so the same characters; no JSON spelling, number or key form differs
    assert '{"' not in text and sorted(again) == sorted(text), (text, again)

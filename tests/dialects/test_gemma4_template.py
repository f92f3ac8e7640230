"""Gemma 4 against Google's chat template (tests/dialects/templates/gemma4.jinja) rendered by
transformers: the ``gemma4`` chat format and kvgate's Jinja path give the same bytes for tools (random
nested parameter schemas included), calls with nested argument values (random ones included), tool
results, system prompts and reasoning, with thinking on and off; a generated turn parses back (at
every split) to a message that renders as the template does."""

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from dialect_helpers import call_id, calls, every_split, issues, rebuild, texts
from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall
from kvgate.dialects._args import openai_tool
from kvgate.dialects.gemma4 import Gemma4, Gemma4ChatFormat

TEMPLATE = (Path(__file__).parent / "templates" / "gemma4.jinja").read_text(encoding="utf-8")
MARKUP = ('<|"|>', "<|tool_call>", "<tool_call|>", "<|tool_response>", "<|channel>", "<channel|>")
GET_WEATHER = Tool("get_weather", "Get the weather ü", {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string", "description": "The city"}, "days": {"type": "integer"},
    "opts": {"type": "object", "required": ["unit"], "properties": {
        "unit": {"type": "string", "enum": ["C", "F"]},
        "Stops": {"type": "array", "items": {"type": "object", "properties": {"at": {"type": "number"}}}}}},
    "tags": {"type": ["array", "null"], "items": {"type": "string"}}, "raw": {"type": "object", "x": 1}}})
ONE_CALL = [Message("system", " Be brief. "), Message("user", "Weather in Paris?"),
            Message("assistant", "", tool_calls=[ToolCall("a", "get_weather", '{"days": 2, "city": "Paris", '
                                                          '"opts": {"unit": "C", "Stops": [{"at": 1.5}, null]}}')]),
            Message("tool", '{"temp": 21}', tool_call_id="a")]
TWO_CALLS = [Message("user", "Paris and Rome?"),
             Message("assistant", "Checking both.", reasoning="need two calls", tool_calls=[
                 ToolCall("a", "get_weather", '{"city": "Paris"}'),
                 ToolCall("b", "get_weather",
                          '{"city": "Rome", "tags": ["x", "Y"], "days": 3, "opts": {"unit": "F"}}')]),
             Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b"),
             Message("assistant", "Sunny, then rainy.")]


def openai_messages(messages: list[Message]) -> list[dict]:
    """The conversation as an OpenAI client sends it, arguments decoded (the template needs a mapping)."""
    out = []
    for m in messages:
        item = {"role": m.role, "content": m.content}
        if m.reasoning:
            item["reasoning_content"] = m.reasoning
        if m.tool_calls:
            item["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": f"{c.namespace}__{c.name}" if c.namespace else c.name,
                "arguments": json.loads(c.arguments)}} for c in m.tool_calls]
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def official(messages, tools, reasoning=None, generation=True) -> str:
    listed = [{"type": "function", "function": openai_tool(t)} for t in tools]
    switch = {} if reasoning is None else {"enable_thinking": reasoning}
    rendered, _ = render_jinja_template(conversations=[openai_messages(messages)], tools=listed or None,
                                        chat_template=TEMPLATE, add_generation_prompt=generation,
                                        bos_token="<bos>", **switch)
    return rendered[0]


def kvgate_both(request: ChatRequest, generation: bool = True) -> tuple[str, str]:
    python = Gemma4ChatFormat(bos="<bos>").render(request, generation)
    return python, JinjaChatFormat(TEMPLATE, Gemma4(), {"bos_token": "<bos>"}).render(request, generation)


@pytest.mark.parametrize("reasoning", [None, False, True])
@pytest.mark.parametrize("messages,tools", [(ONE_CALL, [GET_WEATHER]), (ONE_CALL[:3], [GET_WEATHER]),
                                            (TWO_CALLS, [GET_WEATHER]), (TWO_CALLS + [Message("user", "Oslo?")], [])],
                         ids=["one-call-tools", "call-awaiting-result", "two-calls-reasoning", "no-tools-after-user"])
def test_byte_exact_against_the_official_template(messages, tools, reasoning):
    request = ChatRequest("m", messages, tools=tools, reasoning=reasoning)
    for generation in (True, False):
        expected = official(messages, tools, reasoning, generation)
        assert kvgate_both(request, generation) == (expected, expected)


def test_reference_bytes_of_a_nested_call_and_its_declaration():
    python, _ = kvgate_both(ChatRequest("m", ONE_CALL, tools=[GET_WEATHER]))
    assert ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2,opts:{Stops:[{at:1.5},None],unit:<|"|>C<|"|>}}'
            '<tool_call|><|tool_response>response:get_weather{value:<|"|>{"temp": 21}<|"|>}<tool_response|>') in python
    assert ('opts:{properties:{Stops:{items:{properties:{at:{type:<|"|>NUMBER<|"|>}},type:<|"|>OBJECT<|"|>},'
            'type:<|"|>ARRAY<|"|>},unit:{enum:[<|"|>C<|"|>,<|"|>F<|"|>],type:<|"|>STRING<|"|>}},required:'
            '[<|"|>unit<|"|>],type:<|"|>OBJECT<|"|>}') in python
    assert "raw:{properties:{x:{type:<|\"|><|\"|>}},type:<|\"|>OBJECT<|\"|>}" in python  # the template's quirk


# ---- random schemas and calls

names = st.sampled_from(["a", "B", "b", "type", "items", "x_y", "Zed"])
leaf = st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
                             optional={"description": texts, "enum": st.lists(texts, max_size=2),
                                       "nullable": st.booleans()})
schemas = st.recursive(leaf, lambda inner: st.one_of(
    st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(names, inner, max_size=3)},
                          optional={"required": st.lists(names, max_size=2), "description": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["array", ["array", "null"]]), "items": inner},
                          optional={"minItems": st.integers(0, 2)})), max_leaves=8)


def plain(text: str) -> bool:
    return not any(mark in text for mark in MARKUP)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(properties=st.dictionaries(names, schemas, max_size=4), required=st.lists(names, max_size=2),
       description=texts, message_calls=calls())
def test_random_schemas_and_calls_render_as_the_template_does(properties, required, description, message_calls):
    tool = Tool("get_weather", description, {"type": "object", "properties": properties, "required": required})
    message_calls = [c for c in message_calls if plain(c.arguments.replace('\\"', '"'))]
    messages = [Message("user", "hi"), Message("assistant", "", tool_calls=message_calls)]
    expected = official(messages, [tool])
    assert kvgate_both(ChatRequest("m", messages, tools=[tool])) == (expected, expected)


def test_a_generated_turn_parses_back_to_the_official_rendering():
    """The model's turn after the prompt, parsed at every split, renders as the template does."""
    dialect, calls_made = Gemma4(), TWO_CALLS[1].tool_calls
    completion = "<|channel>thought\nneed two calls<channel|>" + dialect.render_calls(calls_made) + "<|tool_response>"
    events = every_split(lambda: dialect.new_parser([GET_WEATHER], call_id), completion, "")
    again = rebuild(events)
    assert not issues(events) and again.reasoning == "need two calls"
    assert dialect.render_calls(again.tool_calls) == dialect.render_calls(calls_made)
    ids = [attrs.evolve(call, id=made.id) for call, made in zip(again.tool_calls, calls_made)]  # the client's ids
    history = TWO_CALLS[:1] + [Message("assistant", "Checking both.", reasoning=again.reasoning, tool_calls=ids)]
    history += TWO_CALLS[2:]
    assert official(history, [GET_WEATHER]) == official(TWO_CALLS, [GET_WEATHER])
    prompt = official(TWO_CALLS[:1], [GET_WEATHER], reasoning=True)
    assert Gemma4ChatFormat(bos="<bos>").render(ChatRequest("m", TWO_CALLS[:1], tools=[GET_WEATHER],
                                                            reasoning=True)) == prompt

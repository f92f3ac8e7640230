"""Anthropic ``cache_control`` -> retention hints (adapters/anthropic/retention.py), and
``prompt_cache_retention`` on the OpenAI routes (adapters/prompt_cache_retention.py)."""

from __future__ import annotations

import pytest

from kvgate.adapters.anthropic.request import build_chat_request
from kvgate.adapters.openai_chat.request import to_chat_request
from kvgate.adapters.prompt_cache_retention import retention_hints
from kvgate.core.errors import InvalidRequest

HOUR = {"type": "ephemeral", "ttl": "1h"}
TOOL = {"name": "get", "input_schema": {"type": "object"}}


def convert(body):
    return build_chat_request({"model": "m", "max_tokens": 8, **body}, "smollm2", {}, "drop")


def test_each_marked_block_names_the_request_up_to_it():
    request = convert({
        "tools": [{**TOOL, "cache_control": {"type": "ephemeral"}}, {**TOOL, "name": "put"}],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": HOUR}, {"type": "text", "text": "More."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "one", "cache_control": HOUR},
                                                  {"type": "text", "text": "two"}]},
                     {"role": "assistant", "content": "ok"}, {"role": "user", "content": "three"}]})
    tools, system, message = request.retention
    assert (tools.ttl, tools.ttl_seconds, [t.name for t in tools.tools], tools.messages) == ("5m", 300.0, ["get"], [])
    assert system.ttl == "1h" and [(m.role, m.content) for m in system.messages] == [("system", "Be brief.")]
    assert [t.name for t in system.tools] == ["get", "put"]
    assert [(m.role, m.content) for m in message.messages] == [("system", "Be brief.\n\nMore."), ("user", "one")]
    assert message.ttl_seconds == 3600.0


def test_no_cache_control_gives_no_hint():
    assert convert({"messages": [{"role": "user", "content": "hi"}]}).retention == []


def test_an_unknown_ttl_is_a_400_naming_it():
    with pytest.raises(InvalidRequest) as raised:
        convert({"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "2h"}}],
                 "messages": [{"role": "user", "content": "hi"}]})
    assert raised.value.param == "system.0.cache_control.ttl"


@pytest.mark.parametrize("control", [{}, {"type": "persistent"}, "yes"])
def test_a_cache_control_of_another_kind_marks_nothing(control):
    request = convert({"system": [{"type": "text", "text": "s", "cache_control": control}],
                       "messages": [{"role": "user", "content": "hi"}]})
    assert request.retention == []


def test_more_than_four_breakpoints_is_a_400():
    blocks = [{"type": "text", "text": f"b{i}", "cache_control": HOUR} for i in range(5)]
    with pytest.raises(InvalidRequest, match="at most 4"):
        convert({"messages": [{"role": "user", "content": blocks}]})


def test_prompt_cache_retention_24h_marks_the_whole_prompt_and_in_memory_is_the_default():
    (hint,) = retention_hints({"prompt_cache_retention": "24h"})
    assert (hint.ttl, hint.ttl_seconds, hint.messages) == ("24h", 86400.0, None)
    assert retention_hints({"prompt_cache_retention": "in_memory"}) == retention_hints({}) == []
    with pytest.raises(InvalidRequest, match="prompt_cache_retention"):
        retention_hints({"prompt_cache_retention": "1w"})
    chat = to_chat_request({"messages": [{"role": "user", "content": "hi"}], "prompt_cache_retention": "24h"}, "m", False)
    assert [h.ttl for h in chat.retention] == ["24h"]

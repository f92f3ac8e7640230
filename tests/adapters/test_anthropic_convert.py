"""Anthropic request bodies -> canonical ChatRequest (pure conversion)."""

from __future__ import annotations

import json

import pytest

from kvgate.adapters.anthropic.billing import billing_mode, normalize_billing_text
from kvgate.adapters.anthropic.errors import anthropic_error_body
from kvgate.adapters.anthropic.request import build_chat_request
from kvgate.core.errors import ContextLengthExceeded, InvalidRequest, ModelNotFound, Overloaded, Unauthorized

BILLING = "x-anthropic-billing-header: cc_version=2.1.197.abc; cc_entrypoint=cli; cch=1f2e3;"


def convert(body, billing="drop", headers=None):
    return build_chat_request({"model": "m", "max_tokens": 8, **body}, "smollm2", headers or {}, billing)


def user(text="hi"):
    return {"role": "user", "content": text}


def test_system_blocks_billing_header_and_leading_system_messages_fold_into_one_system_turn():
    body = {"system": [{"type": "text", "text": BILLING}, {"type": "text", "text": "Be brief.",
                                                           "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "system", "content": "Also polite."}, user(), {"role": "user", "content": "again"}]}
    request = convert(body)
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == "Be brief.\n\nAlso polite."
    assert request.messages[1].content == "hi\n\nagain"


def test_a_mid_conversation_system_message_stays_in_place():
    """Claude Code's reminders: folding them into the leading system turn would change the prompt
    ahead of the tools, so every turn after one would miss the prefix cache."""
    body = {"system": "Be brief.",
            "messages": [user(), {"role": "assistant", "content": "Hello."},
                         {"role": "system", "content": [{"type": "text", "text": "Reminder."}]}, user("again")]}
    request = convert(body)
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "Be brief."), ("user", "hi"), ("assistant", "Hello."), ("system", "Reminder."), ("user", "again")]


def test_billing_modes_keep_prefix_constant():
    first, second = BILLING, BILLING.replace("1f2e3", "99abc")
    assert normalize_billing_text(first, "constant") == normalize_billing_text(second, "constant")
    assert "cch=00000;" in normalize_billing_text(first, "constant")
    assert normalize_billing_text(first + "\nkeep", "drop") == "keep"
    assert normalize_billing_text(first, "off") == first
    assert billing_mode(True) == "drop" and billing_mode(False) == "off" and billing_mode("constant") == "constant"
    request = convert({"system": BILLING + "\nsys", "messages": [user()]}, billing="constant")
    assert request.messages[0].content.startswith("x-anthropic-billing-header:") and "cch=00000" in request.messages[0].content


def test_tool_round_trip_history():
    call_input = {"city": "Zürich", "days": [1, 2]}
    body = {"messages": [
        user("weather?"),
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "need tool", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": call_input}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "boom"}, {"type": "text", "text": "again"}]},
            {"type": "text", "text": "and now?"}]}]}
    request = convert(body)
    assistant, result, follow = request.messages[1:]
    assert assistant.reasoning == "need tool" and assistant.content == "Checking."
    call = assistant.tool_calls[0]
    assert (call.id, call.name) == ("toolu_1", "get_weather")
    assert call.arguments == '{"city": "Zürich", "days": [1, 2]}' == json.dumps(call_input, ensure_ascii=False)
    assert (result.role, result.tool_call_id, result.is_error, result.content) == ("tool", "toolu_1", True, "Error: boom\n\nagain")
    assert (follow.role, follow.content) == ("user", "and now?")


def test_tools_choice_sampling_thinking_and_unknown_fields():
    body = {"messages": [user()], "temperature": 0.5, "top_k": 5, "stop_sequences": ["END"],
            "thinking": {"type": "adaptive"}, "context_management": {"edits": []}, "output_config": {"effort": "low"},
            "metadata": {"user_id": "session-1"},
            "tools": [{"name": "get_time", "description": "d", "input_schema": {"type": "object"}, "cache_control": {}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "tool", "name": "get_time", "disable_parallel_tool_use": True}}
    request = convert(body)
    assert [t.name for t in request.tools] == ["get_time"]
    assert (request.tool_choice.mode, request.tool_choice.name, request.parallel_tool_calls) == ("named", "get_time", False)
    assert request.sampling.stop == ["END"] and request.sampling.temperature == 0.5 and request.sampling.top_k == 5
    assert request.sampling.max_tokens == 8 and request.reasoning is True and request.cache_key == "session-1"
    assert convert({**body, "tool_choice": {"type": "any"}}).tool_choice.mode == "required"
    assert convert({**body, "tool_choice": {"type": "none"}}).tool_choice.mode == "none"
    assert convert({**body, "thinking": {"type": "disabled"}}).reasoning is False
    assert convert(body, headers={"x-kvgate-cache-key": "k"}).cache_key == "k"
    assert convert(body).request_id != convert(body).request_id


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content"),
    ({"messages": [user()], "max_tokens": 0}, "max_tokens"),
    ({"messages": [user()], "stop_sequences": "END"}, "stop_sequences"),
    ({"messages": [user()], "tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"messages": [user()], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "x"}]}]},
     "messages.0.content.0.input"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages.0.content.0"),
])
def test_bad_input_names_the_field(body, param):
    with pytest.raises(InvalidRequest) as info:
        convert(body)
    assert info.value.param == param and param in info.value.message


def test_image_is_rejected_clearly():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    with pytest.raises(InvalidRequest, match="cannot read images") as info:
        convert({"messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}]})
    assert info.value.param == "messages.0.content.1"


def test_error_bodies_have_anthropic_shape():
    body = anthropic_error_body(ContextLengthExceeded(20000, 8192))
    assert body["type"] == "error" and body["request_id"].startswith("req_")
    assert body["error"] == {"type": "invalid_request_error", "message": "prompt is too long: 20000 tokens > 8192 maximum"}
    assert anthropic_error_body(Unauthorized("no"))["error"]["type"] == "authentication_error"
    assert anthropic_error_body(ModelNotFound("no"))["error"]["type"] == "not_found_error"
    assert anthropic_error_body(Overloaded())["error"]["type"] == "overloaded_error"

"""Canonical event lists -> Chat Completions wire objects and SSE chunks (pure functions).

The rendered output is also fed to the official SDK's own types and stream accumulator
(``ChatCompletion``, ``ChatCompletionStreamState``), which is what clients run.
"""

from __future__ import annotations

import json

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from kvgate.adapters.openai_chat.completion import collect, completion_object
from kvgate.adapters.openai_chat.render import ResponseMeta, new_meta
from kvgate.adapters.openai_chat.stream import KEEP_ALIVE, ChunkRenderer
from kvgate.core.types import (
    ChatRequest, Finished, Heartbeat, ParseIssue, ReasoningDelta, Started, TextDelta, ToolCallArgsDelta, ToolCallEnd,
    Tool, ToolCallStart, ToolChoice, Usage,
)

USAGE = Usage(prompt_tokens=20, completion_tokens=9, reasoning_tokens=4, cached_tokens_device=10, cached_tokens_ssd=6)
TWO_CALLS = [
    Started(20), TextDelta("Checking both."),
    ToolCallStart(0, "a1", "get_weather"), ToolCallArgsDelta(0, '{"city":'), ToolCallArgsDelta(0, '"Paris"}'),
    ToolCallEnd(0, '{"city":"Paris"}'),
    ToolCallStart(1, "b2", "get_time"), ToolCallArgsDelta(1, '{"tz":"CET"}'), ToolCallEnd(1, '{"tz":"CET"}'),
    Finished("tool_calls", USAGE),
]
REASONING_TEXT = [Started(20), ReasoningDelta("User greets; "), ReasoningDelta("reply briefly."),
                  TextDelta("Hi "), TextDelta("there."), Finished("stop", USAGE)]


def meta(named=False, include_usage=False):
    return ResponseMeta(id="chatcmpl-x", created=1760000000, model="asked-name", named_tool_choice=named,
                        include_usage=include_usage)


def render_stream(events, m):
    renderer = ChunkRenderer(m)
    return b"".join(frame for event in events for frame in renderer.render(event))


def payloads(raw: bytes) -> list:
    lines = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def sdk_final(raw: bytes):
    state = ChatCompletionStreamState()
    for payload in payloads(raw):
        if payload != "[DONE]":
            state.handle_chunk(ChatCompletionChunk.model_validate(payload))
    return state.get_final_completion()


def test_non_streaming_tool_calls_object():
    body = completion_object(collect(meta(), TWO_CALLS))
    parsed = ChatCompletion.model_validate(body)
    assert parsed.id == "chatcmpl-x" and parsed.model == "asked-name" and parsed.object == "chat.completion"
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking both."
    calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert calls == [("call_a1", "get_weather", '{"city":"Paris"}'), ("call_b2", "get_time", '{"tz":"CET"}')]
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (20, 9, 29)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 16
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 4
    assert usage["kvgate"] == {"cached_tokens_device": 10, "cached_tokens_ssd": 6, "replayed_tokens": 0}
    assert body["kvgate"] == {"guard_interventions": 0, "parse_issues": []}


def test_non_streaming_content_null_with_only_calls_and_reasoning_field():
    only_calls = [e for e in TWO_CALLS if not isinstance(e, TextDelta)]
    assert completion_object(collect(meta(), only_calls))["choices"][0]["message"]["content"] is None
    body = completion_object(collect(meta(), REASONING_TEXT))
    message = body["choices"][0]["message"]
    assert message["content"] == "Hi there." and message["reasoning_content"] == "User greets; reply briefly."
    assert "tool_calls" not in message and body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("reason, named, calls, expected", [
    ("stop", False, False, "stop"), ("stop_sequence", False, False, "stop"), ("length", False, False, "length"),
    ("tool_calls", False, True, "tool_calls"), ("stop", False, True, "tool_calls"),
    ("tool_calls", True, True, "stop"), ("length", False, True, "length"),
])
def test_finish_reason_rules_in_both_modes(reason, named, calls, expected):
    events = [Started(3)] + (TWO_CALLS[2:9] if calls else [TextDelta("x")]) + [Finished(reason, USAGE, "x")]
    body = completion_object(collect(meta(named), events))
    assert body["choices"][0]["finish_reason"] == expected
    chunks = [p for p in payloads(render_stream(events, meta(named))) if p != "[DONE]"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == expected


def test_only_a_named_function_choice_finishes_with_stop():
    tools = [Tool(name="f"), Tool(name="g")]
    named = ChatRequest(model="m", messages=[], tools=tools, tool_choice=ToolChoice(mode="named", name="f"))
    assert new_meta("m", named).named_tool_choice
    allowed = ChatRequest(model="m", messages=[], tools=tools, tool_choice=ToolChoice(mode="named", name="f"),
                          extra={"allowed_tools": ["f"]})
    assert not new_meta("m", allowed).named_tool_choice
    assert not new_meta("m", ChatRequest(model="m", messages=[], tools=tools)).named_tool_choice


def test_stream_tool_calls_follow_the_fragment_rules():
    raw = render_stream(TWO_CALLS, meta(include_usage=True))
    chunks = payloads(raw)
    assert chunks[-1] == "[DONE]" and raw.endswith(b"data: [DONE]\n\n")
    chunks = chunks[:-1]
    assert {(c["id"], c["created"], c["object"], c["model"]) for c in chunks} == {
        ("chatcmpl-x", 1760000000, "chat.completion.chunk", "asked-name")}
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert sum("role" in d for d in deltas) == 1 and deltas[0]["role"] == "assistant"
    fragments = [f for d in deltas for f in d.get("tool_calls", [])]
    firsts = [f for f in fragments if "id" in f]
    assert [(f["index"], f["id"], f["type"], f["function"]) for f in firsts] == [
        (0, "call_a1", "function", {"name": "get_weather", "arguments": ""}),
        (1, "call_b2", "function", {"name": "get_time", "arguments": ""})]
    for later in (f for f in fragments if "id" not in f):
        assert set(later) == {"index", "function"} and set(later["function"]) == {"arguments"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 29
    assert all("usage" not in c for c in chunks[:-1])
    final = sdk_final(raw)
    calls = [(c.id, c.function.name, c.function.arguments) for c in final.choices[0].message.tool_calls]
    assert calls == [("call_a1", "get_weather", '{"city":"Paris"}'), ("call_b2", "get_time", '{"tz":"CET"}')]
    assert final.choices[0].message.content == "Checking both." and final.usage.prompt_tokens == 20


def test_stream_without_include_usage_has_no_usage_chunk():
    chunks = payloads(render_stream(REASONING_TEXT, meta()))[:-1]
    assert all(c["choices"] and "usage" not in c for c in chunks)
    final = sdk_final(render_stream(REASONING_TEXT, meta()))
    assert final.choices[0].message.content == "Hi there."
    assert final.choices[0].message.model_extra["reasoning_content"] == "User greets; reply briefly."


def test_heartbeat_is_an_sse_comment_and_role_is_not_repeated():
    renderer = ChunkRenderer(meta())
    assert renderer.render(Heartbeat()) == [KEEP_ALIVE]
    started = renderer.render(Started(5))
    assert len(started) == 1 and b'"role":"assistant"' in started[0]
    assert renderer.render(Heartbeat()) == [KEEP_ALIVE]
    assert b"role" not in renderer.render(TextDelta("x"))[0]


def test_tool_call_end_sends_arguments_not_streamed_yet():
    events = [Started(3), ToolCallStart(0, "id", "f"), ToolCallArgsDelta(0, '{"a"'), ToolCallEnd(0, '{"a": 1}'),
              Finished("tool_calls", USAGE)]
    final = sdk_final(render_stream(events, meta()))
    assert final.choices[0].message.tool_calls[0].function.arguments == '{"a": 1}'


def test_parse_issues_and_guard_interventions_are_surfaced():
    issue = ParseIssue("duplicate parameter 'a'", raw='{"a":1,"a":2}')
    events = [Started(3), TextDelta("x"), issue, Finished("stop", USAGE, guard_interventions=2, issues=[issue])]
    body = completion_object(collect(meta(), events))
    assert body["kvgate"] == {"guard_interventions": 2, "parse_issues": [{"message": issue.message, "raw": issue.raw}]}
    finish = [c for c in payloads(render_stream(events, meta()))[:-1] if c["choices"][0]["finish_reason"]][0]
    assert finish["kvgate"]["parse_issues"] == [{"message": issue.message, "raw": issue.raw}]


def test_generation_error_becomes_an_in_stream_error():
    events = [Started(3), TextDelta("x"), Finished("error", USAGE, issues=[ParseIssue("engine failed")])]
    chunks = payloads(render_stream(events, meta()))
    assert chunks[-1] == "[DONE]"
    error = chunks[-2]["error"]
    assert "engine failed" in error["message"] and error["type"] == "server_error"

"""Canonical events -> Anthropic wire events, as pure functions, checked by rule and by the SDK."""

from __future__ import annotations

import json

from anthropic.lib.streaming._messages import accumulate_event

from kvgate.adapters.anthropic.message import fold_message
from kvgate.adapters.anthropic.stream import MessageStream
from kvgate.core.types import (
    Finished, Heartbeat, ParseIssue, ReasoningDelta, Started, TextDelta, ToolCallArgsDelta, ToolCallEnd,
    ToolCallStart, Usage)


def assert_anthropic_wire(wire: list[tuple[str, dict]]) -> None:
    """The order rules Anthropic clients rely on (message_start first, blocks 0..n, no interleaving)."""
    names = [name for name, _ in wire if name != "ping"]
    assert all(name == data["type"] for name, data in wire)
    assert names[0] == "message_start" and names.count("message_start") == 1
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("message_delta") == 1 and names.count("message_stop") == 1
    assert wire[0][1]["message"]["content"] == []
    open_index, next_index = None, 0
    for name, data in wire:
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index, next_index = data["index"], next_index + 1
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
        elif name in ("message_delta", "message_stop"):
            assert open_index is None
    usage = [data for name, data in wire if name == "message_delta"][0]["usage"]
    assert isinstance(usage["output_tokens"], int)


def sdk_fold(wire):
    snapshot, bufs = None, {}
    for name, data in wire:
        if name != "ping":
            snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def render(events):
    stream = MessageStream("msg_test", "claude-test")
    wire = [item for event in events for item in stream.feed(event)]
    return wire


def finished(reason="stop", prompt=10, cached=4, completion=3, stop_sequence=None):
    return Finished(reason, Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens_device=cached),
                    stop_sequence=stop_sequence)


def tool_call(index, name, pieces, arguments=None):
    return [ToolCallStart(index, f"id{index}", name), *(ToolCallArgsDelta(index, p) for p in pieces),
            ToolCallEnd(index, "".join(pieces) if arguments is None else arguments)]


def test_plain_text_order_usage_and_early_ping():
    wire = render([Started(10), Heartbeat(), TextDelta("Hel"), TextDelta("lo!"), finished()])
    assert_anthropic_wire(wire)
    assert [name for name, _ in wire[:3]] == ["message_start", "ping", "ping"]
    start_usage = wire[0][1]["message"]["usage"]
    assert start_usage["input_tokens"] == 10 and start_usage["cache_read_input_tokens"] == 0
    delta = [d for n, d in wire if n == "message_delta"][0]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": 6, "output_tokens": 3, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 4,
                              "kvgate": {"cached_tokens_device": 4, "cached_tokens_ssd": 0, "replayed_tokens": 0}}
    message = sdk_fold(wire)
    assert message.content[0].text == "Hello!" and message.usage.cache_read_input_tokens == 4
    assert message.usage.input_tokens == 6


def test_thinking_then_text_then_two_tools():
    events = [Started(5), ReasoningDelta("think "), ReasoningDelta("more"), TextDelta("Checking."),
              *tool_call(0, "get_weather", ['{"city": ', '"Paris"}']),
              *tool_call(1, "get_time", ['{"tz": "CET"}']), finished("tool_calls")]
    wire = render(events)
    assert_anthropic_wire(wire)
    deltas = [d["delta"]["type"] for n, d in wire if n == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta",
                      "input_json_delta", "input_json_delta", "input_json_delta"]
    message = sdk_fold(wire)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking == "think more" and message.content[0].signature
    assert message.content[2].input == {"city": "Paris"} and message.content[2].id == "toolu_id0"
    assert message.content[3].input == {"tz": "CET"}
    assert message.stop_reason == "tool_use"
    folded = fold_message(wire)
    sdk = message.model_dump(exclude_none=True)
    assert folded["content"] == sdk["content"] and folded["stop_reason"] == sdk["stop_reason"]
    # the SDK keeps only the usage fields it knows from message_delta; kvgate's comes from there too
    assert {k: v for k, v in folded["usage"].items() if k != "kvgate"} == sdk["usage"]
    assert folded["usage"]["kvgate"] == [d for n, d in wire if n == "message_delta"][0]["usage"]["kvgate"]


def test_tool_stop_reason_even_when_engine_says_stop_or_length():
    for reason in ("stop", "length"):
        wire = render([Started(1), *tool_call(0, "f", ['{}']), TextDelta("more"), finished(reason)])
        assert sdk_fold(wire).stop_reason == "tool_use"


def test_stop_sequence_and_length_mapping():
    wire = render([Started(1), TextDelta("a"), finished("stop_sequence", stop_sequence="END")])
    assert sdk_fold(wire).stop_reason == "stop_sequence" and sdk_fold(wire).stop_sequence == "END"
    wire = render([Started(1), TextDelta("a"), finished("length")])
    assert sdk_fold(wire).stop_reason == "max_tokens" and sdk_fold(wire).stop_sequence is None


def test_invalid_argument_fragment_is_held_back_and_closed():
    wire = render([Started(1), *tool_call(0, "f", ['{"a": 1', ']garbage'], arguments='{"a": 1]garbage'),
                   finished("tool_calls")])
    assert_anthropic_wire(wire)
    fragments = "".join(d["delta"]["partial_json"] for n, d in wire if n == "content_block_delta")
    assert json.loads(fragments) == {"a": 1}
    assert sdk_fold(wire).content[0].input == {"a": 1}


def test_arguments_that_are_not_an_object_become_empty_input():
    wire = render([Started(1), ToolCallStart(0, "x", "f"), ToolCallEnd(0, "[1, 2]"), finished("tool_calls")])
    fragments = "".join(d["delta"]["partial_json"] for n, d in wire if n == "content_block_delta")
    assert json.loads(fragments) == {}


def test_final_arguments_complete_what_deltas_left_out():
    wire = render([Started(1), ToolCallStart(0, "x", "f"), ToolCallArgsDelta(0, '{"path": "a'),
                   ToolCallEnd(0, '{"path": "a.txt", "n": 2}'), finished("tool_calls")])
    fragments = [d["delta"]["partial_json"] for n, d in wire if n == "content_block_delta"]
    assert fragments == ['{"path": "a', '.txt", "n": 2}']


def test_unfinished_tool_call_is_closed_at_finish():
    wire = render([Started(1), *tool_call(0, "g", ['{}']), ToolCallStart(1, "x", "f"),
                   ToolCallArgsDelta(1, '{"a": [1, tr'), finished("length")])
    assert_anthropic_wire(wire)
    message = sdk_fold(wire)
    assert message.content[1].input == {"a": [1, True]} and message.stop_reason == "max_tokens"


def test_parse_issue_and_empty_deltas_produce_no_blocks():
    wire = render([Started(1), TextDelta(""), ParseIssue("bad"), ReasoningDelta(""), finished()])
    assert_anthropic_wire(wire)
    assert not [n for n, _ in wire if n.startswith("content_block")]


def test_error_finish_is_an_error_event():
    wire = render([Started(1), TextDelta("x"), finished("error")])
    assert wire[-1][0] == "error" and wire[-1][1]["error"]["type"] == "api_error"
    assert wire[-2][0] == "content_block_stop"
    assert fold_message(wire) is None


def test_namespaced_call_is_flattened():
    wire = render([Started(1), ToolCallStart(0, "x", "inner", namespace="ns"), ToolCallEnd(0, "{}"),
                   finished("tool_calls")])
    assert sdk_fold(wire).content[0].name == "ns__inner"


def test_leading_whitespace_is_never_sent_alone():
    wire = render([Started(1), *tool_call(0, "f", [" ", "\n", '{"a"', ': 1}']), finished("tool_calls")])
    fragments = [d["delta"]["partial_json"] for n, d in wire if n == "content_block_delta"]
    assert fragments == [' \n{"a"', ": 1}"]
    assert sdk_fold(wire).content[0].input == {"a": 1}

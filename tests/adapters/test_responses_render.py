"""The Responses event renderer on canonical event lists (the adapter's own logic, no model).

``check_event_stream`` holds the ordering rules of protocols.md 2.7 / 2.11; the server tests
import it to check real streams too. Rendered streams are also fed through the openai SDK's own
stream accumulator (``ResponseStreamState``), which raises on the mistakes it knows.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai._models import construct_type
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from kvgate.adapters.responses.input_items import decode_reasoning
from kvgate.adapters.responses.objects import response_envelope
from kvgate.adapters.responses.render import StreamRenderer
from kvgate.core.types import (Finished, Heartbeat, ParseIssue, ReasoningDelta, Started, TextDelta,
                               ToolCallArgsDelta, ToolCallEnd, ToolCallStart, Usage)

TERMINALS = {"response.completed", "response.incomplete", "response.failed"}


def check_event_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Assert the ordering rules on raw events; return the terminal response."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    terminals = [e for e in events if e["type"] in TERMINALS]
    assert len(terminals) == 1 and events[-1] is terminals[0]
    final = terminals[0]["response"]
    assert {e["response"]["id"] for e in events if "response" in e} == {final["id"]}
    added = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    assert sorted(added) == sorted(done) == list(range(len(final["output"])))
    for index, item in enumerate(final["output"]):
        for key in ("type", "id", "call_id", "name", "namespace"):
            assert added[index].get(key) == done[index].get(key) == item.get(key), (index, key)
        assert done[index] == item
        if item["type"] == "reasoning":
            assert isinstance(item["summary"], list)
        if item["type"] == "function_call":
            assert item["name"] and isinstance(item["arguments"], str) and item["call_id"].startswith("call_")
    _check_items_one_at_a_time(events)
    usage = final["usage"]
    assert usage is not None
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert type(usage[key]) is int
    assert type(usage["input_tokens_details"]["cached_tokens"]) is int
    assert type(usage["output_tokens_details"]["reasoning_tokens"]) is int
    return final


def _check_items_one_at_a_time(events: list[dict[str, Any]]) -> None:
    open_index = None
    for event in events:
        if event["type"] == "response.output_item.added":
            assert open_index is None, "an item opened before the previous one was done"
            open_index = event["output_index"]
        elif event["type"] == "response.output_item.done":
            assert open_index == event["output_index"]
            open_index = None
        elif "output_index" in event:
            assert event["output_index"] == open_index, event
    assert open_index is None


def sdk_final_response(events: list[dict[str, Any]]):
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for raw in json.loads(json.dumps(events)):
        state.handle_event(construct_type(type_=ResponseStreamEvent, value=raw))
    return state._completed_response


def render(canonical: list, body: dict | None = None, encrypted: bool = False) -> list[dict[str, Any]]:
    renderer = StreamRenderer(response_envelope("resp_test", body or {"model": "m"}), encrypted)
    events = renderer.start()
    for event in canonical:
        events += renderer.feed(event)
    return events


USAGE = Usage(prompt_tokens=20, completion_tokens=9, reasoning_tokens=4, cached_tokens_device=12,
              cached_tokens_ssd=4)


def test_plain_text_matches_the_documented_sequence():
    events = render([Started(20), Heartbeat(), TextDelta("Hel"), TextDelta("lo!"), Finished("stop", USAGE)])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    final = check_event_stream(events)
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello!"
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 16
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 4
    assert final["usage"]["total_tokens"] == 29
    assert sdk_final_response(events).output_text == "Hello!"


def test_reasoning_text_and_two_calls_become_separate_items():
    canonical = [
        ReasoningDelta("think "), ReasoningDelta("hard"), TextDelta("Checking."),
        ToolCallStart(0, "a1", "get_weather"), ToolCallArgsDelta(0, '{"city":'), ToolCallArgsDelta(0, '"Paris"}'),
        ToolCallEnd(0, '{"city":"Paris"}'), ParseIssue("ignored"),
        ToolCallStart(1, "b2", "search", namespace="docs"), ToolCallEnd(1, '{"q":"x"}'),
        Finished("tool_calls", USAGE)]
    events = render(canonical, encrypted=True)
    final = check_event_stream(events)
    kinds = [item["type"] for item in final["output"]]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    reasoning, _, weather, search = final["output"]
    assert reasoning["summary"] == [] and reasoning["content"][0]["text"] == "think hard"
    assert decode_reasoning(reasoning["encrypted_content"]) == "think hard"
    assert (weather["call_id"], weather["name"], weather["arguments"]) == ("call_a1", "get_weather", '{"city":"Paris"}')
    assert (search["name"], search["namespace"], search["call_id"]) == ("search", "docs", "call_b2")
    arguments_done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in arguments_done] == ['{"city":"Paris"}', '{"q":"x"}']
    parsed = sdk_final_response(events)
    assert [o.type for o in parsed.output] == kinds
    assert parsed.output[2].arguments == '{"city":"Paris"}'
    plain = check_event_stream(render(canonical))["output"][0]
    assert "encrypted_content" not in plain  # Open Responses: a string when present, never null


def test_length_finish_is_incomplete_with_the_open_item_incomplete():
    events = render([TextDelta("partial"), Finished("length", USAGE)])
    final = check_event_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"


def test_empty_generation_still_has_one_message_item():
    events = render([Started(5), Finished("stop", Usage(prompt_tokens=5))])
    final = check_event_stream(events)
    assert [item["type"] for item in final["output"]] == ["message"]
    assert sdk_final_response(events).output_text == ""


def test_failure_renders_response_failed_with_the_code():
    renderer = StreamRenderer(response_envelope("resp_x", {"model": "m"}))
    events = renderer.start() + renderer.fail("context_length_exceeded", "too long")
    final = check_event_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert final["error"] == {"code": "context_length_exceeded", "message": "too long"}
    assert renderer.feed(TextDelta("late")) == [] and renderer.fail("x", "y") == []


def test_unfinished_call_is_closed_at_finish_and_kept_for_history():
    renderer = StreamRenderer(response_envelope("resp_y", {"model": "m"}))
    events = renderer.start()
    for event in [ToolCallStart(0, "c", "f"), ToolCallArgsDelta(0, '{"a":'), Finished("length", USAGE)]:
        events += renderer.feed(event)
    final = check_event_stream(events)
    assert final["output"][0]["arguments"] == '{"a":'
    assert [(c.id, c.name) for c in renderer.assistant.tool_calls] == [("call_c", "f")]


@pytest.mark.parametrize("reason, terminal", [("stop", "response.completed"), ("stop_sequence", "response.completed"),
                                              ("error", "response.failed"), ("cancelled", "response.failed")])
def test_every_finish_reason_has_one_terminal(reason, terminal):
    events = render([TextDelta("x"), Finished(reason, USAGE)])
    check_event_stream(events)
    assert events[-1]["type"] == terminal


def test_envelope_echoes_the_request():
    body = {"model": "gpt-x", "instructions": "be brief", "tools": [{"type": "web_search"}], "store": False,
            "previous_response_id": "resp_prev", "parallel_tool_calls": False, "max_output_tokens": 8}
    events = render([TextDelta("ok"), Finished("stop", USAGE)], body)
    final = events[-1]["response"]
    assert (final["model"], final["instructions"], final["store"], final["previous_response_id"]) == (
        "gpt-x", "be brief", False, "resp_prev")
    assert final["parallel_tool_calls"] is False and final["tools"] == [{"type": "web_search"}]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Events of an SSE body; checks that each ``event:`` name equals its payload's ``type``."""
    events = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next(line[7:] for line in lines if line.startswith("event: "))
        data = json.loads("\n".join(line[6:] for line in lines if line.startswith("data: ")))
        assert data["type"] == name
        events.append(data)
    return events

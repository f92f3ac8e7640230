"""The loop guard ends a reply that keeps coming back to a loop: real `kvgate serve`, the embedded
SmolLM2. Greedy SmolLM2 asked to write a word 50 times writes "1. Hello\n2. Hello\n..."; with the
guard's patterns tightened for the test (2 copies of up to 8 tokens are a loop, so the third
exclusion comes within ~30 tokens on a shared CPU; the defaults' 48-315 tokens are covered by
test_loop_stop.py) the reply ends long before its cap, labelled as a natural end in each protocol
(so no client asks to continue a loop) with kvgate's ``guard_stop`` mark, and the metric counts it.
On the defaults a normal answer ends by itself, unmarked (greedy SmolLM2 answers "Repeat the
word 'hello' forever." in one short sentence)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
LOOPING = [{"role": "user", "content": "Write the word 'hello' 50 times."}]
NORMAL = [{"role": "user", "content": "Repeat the word 'hello' forever."}]  # answered in 24 tokens
CAP = 120
TIGHT = {"max_token_repeats": 4, "max_pattern_period": 8, "min_pattern_repeats": 2}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("loop-stop"), {"cache": {"ssd_enabled": False}, "guard": TIGHT}) as running:
        yield running


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("loop-stop-defaults"), {"cache": {"ssd_enabled": False}}) as running:
        yield running


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, timeout=600)
    assert reply.status_code == 200, reply.text
    return reply.json()


def chat(server, messages: list[dict]) -> dict:
    return post(server, "/v1/chat/completions",
                {"model": "smollm2", "messages": messages, "max_tokens": CAP, "temperature": 0})


def guard_stops(server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("kvgate_guard_stops_total"))


def test_a_looping_reply_ends_early_as_stop_marked_guard_stop(server):
    before = guard_stops(server)
    body = chat(server, LOOPING)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["kvgate"]["guard_stop"] is True and body["kvgate"]["guard_interventions"] >= 3
    assert body["usage"]["completion_tokens"] < CAP
    assert guard_stops(server) == before + 1


def test_anthropic_says_end_turn_and_marks_it_in_the_stream(server):
    request = {"model": "claude-x", "max_tokens": CAP, "temperature": 0, "messages": LOOPING}
    message = post(server, "/v1/messages", request)
    assert message["stop_reason"] == "end_turn" and message["kvgate"] == {"guard_stop": True}
    assert message["usage"]["output_tokens"] < CAP
    with httpx.stream("POST", server.base_url + "/v1/messages", json={**request, "stream": True}, timeout=600) as reply:
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    delta = next(event for event in events if event["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["kvgate"] == {"guard_stop": True}


def test_responses_completes_and_marks_it(server):
    response = post(server, "/v1/responses", {"model": "smollm2", "input": LOOPING[0]["content"], "max_output_tokens": CAP,
                                              "temperature": 0})
    assert response["status"] == "completed" and response["incomplete_details"] is None
    assert response["kvgate"] == {"guard_stop": True}


def test_a_normal_answer_is_not_cut_on_the_defaults(default_server):
    body = chat(default_server, NORMAL)
    assert body["choices"][0]["finish_reason"] == "stop" and "guard_stop" not in body["kvgate"]
    assert "Hello" in body["choices"][0]["message"]["content"] and body["usage"]["completion_tokens"] < CAP
    assert guard_stops(default_server) == 0

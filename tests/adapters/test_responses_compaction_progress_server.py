"""Compaction's summary pass on a real server (embedded SmolLM2) is not silent: over SSE and
WebSocket the client gets ``response.created`` and the ``compaction`` item's ``output_item.added``
at once, then progress events while the model writes the summary (a ``compaction_trigger`` too).
Every response echoes the ``context_management`` and ``prompt_cache_retention`` in force, over HTTP
JSON, SSE, WebSocket and ``GET /v1/responses/{id}``."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.sync.client import connect

from kvgate.adapters.responses.summary_pass import PROGRESS_SECONDS
from tests.adapters.test_responses_render import check_event_stream
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

THRESHOLD = 1000
DEFAULT_THRESHOLD = int(32768 * 0.8)  # the default context's share (context_management.DEFAULT_SHARE)
MANAGED = {"model": "smollm2", "temperature": 0, "max_output_tokens": 8,
           "context_management": [{"type": "compaction", "compact_threshold": THRESHOLD}]}
PROGRESS = ("response.in_progress", "response.compaction.compacting")
SLACK_SECONDS = 8.0  # a busy machine's scheduling delay on top of the progress interval
TERMINALS = ("response.completed", "response.incomplete", "response.failed", "error")


def long_input(topic: str) -> list[dict]:
    """A conversation well over THRESHOLD, its own per test (so no test's summary prefill is cached), long
    enough that the summary pass outlasts PROGRESS_SECONDS: ~3,200 tokens, the pass ~4 s on CI's machine
    (1,300 had taken ~2 s before the native layer's int8 activations, and under 2 s after)."""
    notes = " ".join(f"Step {i}: the {topic} reads file_{i}.py and checks its tokens." for i in range(200))
    return [{"role": "user", "content": f"Here are my notes on the {topic}. {notes}"},
            {"role": "assistant", "content": "Thanks, I have read the notes."},
            {"role": "user", "content": "Which file should I fix first?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"engine": {"default_max_tokens": 48}}  # caps the summaries: a short test on a busy machine
    with ServerProcess(tmp_path_factory.mktemp("compaction-progress"), settings=settings) as proc:
        yield proc


def timed_sse(server, body: dict) -> list[tuple[float, dict]]:
    started = time.monotonic()
    with httpx.stream("POST", server.base_url + "/v1/responses", json=body, timeout=600) as reply:
        assert reply.status_code == 200
        return [(time.monotonic() - started, json.loads(line[6:])) for line in reply.iter_lines()
                if line.startswith("data: ")]


def timed_ws(server, body: dict) -> list[tuple[float, dict]]:
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        started = time.monotonic()
        socket.send(json.dumps({"type": "response.create", **body}))
        timed: list[tuple[float, dict]] = []
        while not timed or timed[-1][1]["type"] not in TERMINALS:
            frame = json.loads(socket.recv(timeout=600))
            timed.append((time.monotonic() - started, frame))
        return timed


def assert_progress_during_the_summary(timed: list[tuple[float, dict]]) -> dict:
    """The compaction item opens at once, progress flows until it is done; the final response."""
    events = [event for _, event in timed]
    final = check_event_stream(events)
    item = final["output"][0]
    assert [e["type"] for e in events[:3]] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert events[2]["item"] == {"type": "compaction", "id": item["id"], "encrypted_content": ""}
    done = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.done")
    assert events[done]["item"] == item and item["encrypted_content"]
    progress = events[3:done]
    assert progress and all(e["type"] in PROGRESS for e in progress), [e["type"] for e in events[:done + 1]]
    for event in progress:
        if event["type"] == "response.compaction.compacting":
            assert event["item_id"] == item["id"] and event["output_index"] == 0
    gaps = [later - earlier for (earlier, _), (later, _) in zip(timed[:done], timed[1:done + 1])]
    assert max(gaps) < PROGRESS_SECONDS + SLACK_SECONDS, gaps
    assert timed[2][0] < timed[done][0] - PROGRESS_SECONDS  # the item opened while the summary ran
    return final


def test_sse_sends_progress_while_the_summary_is_written(server):
    final = assert_progress_during_the_summary(timed_sse(server, {**MANAGED, "stream": True,
                                                                  "input": long_input("parser")}))
    assert len(final["output"]) > 1 and final["output"][1]["type"] != "compaction"  # then the answer
    assert final["context_management"] == MANAGED["context_management"]
    assert final["prompt_cache_retention"] == "in_memory"


def test_websocket_sends_progress_while_the_summary_is_written(server):
    final = assert_progress_during_the_summary(timed_ws(server, {**MANAGED, "input": long_input("lexer"),
                                                                 "prompt_cache_retention": "24h"}))
    assert final["context_management"] == MANAGED["context_management"]
    assert final["prompt_cache_retention"] == "24h"


def test_a_compaction_trigger_streams_exactly_one_compaction_item_with_progress(server):
    body = {"model": "smollm2", "temperature": 0, "stream": True,
            "input": [*long_input("linker"), {"type": "compaction_trigger"}]}
    final = assert_progress_during_the_summary(timed_sse(server, body))
    assert [item["type"] for item in final["output"]] == ["compaction"] and final["status"] == "completed"
    assert final["usage"]["output_tokens"] > 0


def test_http_json_and_the_stored_response_echo_the_values_in_force(server):
    body = {"model": "smollm2", "input": "Hi", "max_output_tokens": 4, "prompt_cache_retention": "24h",
            "context_management": [{"type": "compaction"}]}  # no threshold: the server's default applies
    reply = httpx.post(server.base_url + "/v1/responses", json=body, timeout=300).json()
    stored = httpx.get(server.base_url + f"/v1/responses/{reply['id']}", timeout=60).json()
    for response in (reply, stored):
        assert response["context_management"] == [{"type": "compaction", "compact_threshold": DEFAULT_THRESHOLD}]
        assert response["prompt_cache_retention"] == "24h"
    plain = httpx.post(server.base_url + "/v1/responses", json={"model": "smollm2", "input": "Hi",
                                                                "max_output_tokens": 4}, timeout=300).json()
    assert plain["context_management"] is None and plain["prompt_cache_retention"] == "in_memory"


def test_every_sse_event_carrying_the_response_echoes_them(server):
    events = [e for _, e in timed_sse(server, {"model": "smollm2", "input": "Hi", "max_output_tokens": 4,
                                               "stream": True, "prompt_cache_retention": "in_memory"})]
    carrying = [e["response"] for e in events if "response" in e]
    assert len(carrying) >= 3
    assert all(r["context_management"] is None and r["prompt_cache_retention"] == "in_memory" for r in carrying)

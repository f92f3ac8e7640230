"""``context_management`` compaction on a real server (embedded SmolLM2): a conversation over the
threshold is compacted by the model before the answer, over HTTP (SDK and SSE) and WebSocket; the
``compaction`` item comes first and reads back; the next turn's prefix is cached; bad entries are 400s."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from websockets.sync.client import connect

from kvgate.adapters.responses.compaction_item import PREFIX
from tests.adapters.test_responses_render import check_event_stream
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

THRESHOLD = 1000
TERMINALS = ("response.completed", "response.incomplete", "response.failed", "error")
MANAGED = {"model": "smollm2", "temperature": 0, "max_output_tokens": 8,
           "context_management": [{"type": "compaction", "compact_threshold": THRESHOLD}]}
NOTES = " ".join(f"Step {i}: the parser reads file_{i}.py and checks its tokens." for i in range(90))
LONG_INPUT = [{"role": "user", "content": "Here are my notes on the parser. " + NOTES},
              {"role": "assistant", "content": "Thanks, I have read the notes."},
              {"role": "user", "content": "Which file should I fix first?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"cache": {"cached_tokens_granularity": 1},  # cached tokens reported exactly
                "engine": {"default_max_tokens": 32}}  # caps the summaries: a short test on a busy machine
    with ServerProcess(tmp_path_factory.mktemp("context-management"), settings=settings) as proc:
        yield proc


def post(server, body: dict) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/responses", json=body, timeout=300)


def input_tokens(server, items) -> int:
    reply = httpx.post(server.base_url + "/v1/responses/input_tokens", json={"input": items}, timeout=120)
    return reply.json()["input_tokens"]


def assert_compacted(output: list[dict]) -> None:
    assert output[0]["type"] == "compaction" and output[0]["encrypted_content"].startswith(PREFIX)
    assert len(output) > 1 and all(item["type"] != "compaction" for item in output[1:])


def test_the_sdk_gets_the_compaction_item_first_and_the_next_turns_hit_the_cache(server):
    assert input_tokens(server, LONG_INPUT) > THRESHOLD
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)
    first = client.responses.create(input=LONG_INPUT, **MANAGED).model_dump(exclude_none=True)
    assert_compacted(first["output"])
    assert first["usage"]["input_tokens"] < THRESHOLD  # answered on the compacted context
    follow_up = {"role": "user", "content": "And after that?"}
    resent = post(server, {**MANAGED, "input": [*first["output"], follow_up]}).json()  # stateless chaining
    chained = post(server, {**MANAGED, "previous_response_id": first["id"], "input": [follow_up]}).json()
    for reply in (resent, chained):
        assert reply["status"] in ("completed", "incomplete") and reply["output"][0]["type"] != "compaction"
        usage = reply["usage"]
        assert usage["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"], (usage, first["usage"])


def test_the_sse_stream_carries_the_item_at_index_zero(server):
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**MANAGED, "stream": True,
                                                                       "input": LONG_INPUT}, timeout=300) as reply:
        assert reply.status_code == 200
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
    final = check_event_stream(events)
    assert_compacted(final["output"])
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["output_index"] == 0 and added[0]["item"]["type"] == "compaction"


def create(socket, **body) -> list[dict]:
    socket.send(json.dumps({"type": "response.create", **body}))
    frames = []
    while not frames or frames[-1]["type"] not in TERMINALS:
        frames.append(json.loads(socket.recv(timeout=300)))
    return frames


def test_websocket_compacts_and_refuses_a_bad_threshold(server):
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        bad = create(socket, **{**MANAGED, "context_management": [{"type": "compaction", "compact_threshold": 10}]},
                     input="Hi")
        assert bad[-1]["type"] == "error" and bad[-1]["error"]["param"] == "context_management[0].compact_threshold"
        assert_compacted(check_event_stream(create(socket, **MANAGED, input=LONG_INPUT))["output"])


@pytest.mark.parametrize("entries, param", [
    ({"type": "compaction"}, "context_management"),
    ([{"type": "truncation"}], "context_management[0].type"),
    (["compaction"], "context_management[0].type"),
    ([{"type": "compaction", "compact_threshold": 999}], "context_management[0].compact_threshold"),
    ([{"type": "compaction", "compact_threshold": "2000"}], "context_management[0].compact_threshold"),
    ([{"type": "compaction", "compact_threshold": True}], "context_management[0].compact_threshold"),
])
def test_a_bad_entry_is_a_400_in_the_responses_shape(server, entries, param):
    reply = post(server, {**MANAGED, "context_management": entries, "input": "Hi"})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and "context_management" in error["message"]


def test_under_the_threshold_nothing_is_compacted(server):
    reply = post(server, {**MANAGED, "input": "Hi", "context_management": [{"type": "compaction"}]}).json()
    assert reply["status"] in ("completed", "incomplete") and reply["output"][0]["type"] == "message"
    assert all(item["type"] != "compaction" for item in reply["output"])

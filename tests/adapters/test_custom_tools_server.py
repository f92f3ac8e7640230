"""Custom (freeform) tools end to end over the real server on the embedded model.

Codex 0.171's tools (an ``additional_tools`` item holding namespaces, the custom ``exec`` tool with
its Lark grammar among function tools) on Responses: a named ``exec`` call comes back as a
``custom_tool_call`` whose input its grammar accepts (checked with Python's ``re`` on the
translated regex and with llguidance's own Lark parser), streamed as
``custom_tool_call_input`` events, and resent with its output it renders the same prefix (the cache
covers the first turn's prompt and output), over HTTP and, as Codex continues a conversation, over
a WebSocket by ``previous_response_id`` with only the tool output. A grammar that cannot be
enforced is a 400 in each protocol's shape (Chat Completions: test_custom_tools_chat_server.py).
"""

from __future__ import annotations

import json
import re

import httpx
import llguidance
import pytest
from websockets.sync.client import connect

from kvgate.plugins.lark_grammar.to_regex import lark_to_regex
from tests.adapters.codex_tools import EXEC_GRAMMAR, additional_tools_item
from tests.adapters.test_responses_render import check_event_stream, parse_sse
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
ASK = {"role": "user", "content": [{"type": "input_text", "text": "list files"}]}
CODEX = {"model": "smollm2", "temperature": 0, "max_output_tokens": 48, "parallel_tool_calls": False,
         "store": False, "tool_choice": {"type": "custom", "name": "exec"}}
MAX_CACHE_GAP = 1  # the last sampled token is not fed through the model (tests/continuity)
RECURSIVE = 'start: e\ne: "(" e ")" | "1"'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"cache": {"cached_tokens_granularity": 1}}
    with ServerProcess(tmp_path_factory.mktemp("custom_tools"), settings) as proc:
        yield proc


@pytest.fixture(scope="module")
def lark_accepts():
    """llguidance's Lark parser on ``EXEC_GRAMMAR`` (byte-level: fed the text's UTF-8 bytes)."""
    from kvgate.models.embedded import embedded_gguf_path
    from kvgate.models.gguf_loader import open_gguf, read_metadata
    from kvgate.models.gguf_tokenizer import build_tokenizer

    tokenizer = llguidance.LLTokenizer(build_tokenizer(read_metadata(open_gguf(embedded_gguf_path()))).to_str())

    def accepts(text: str) -> bool:
        matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(EXEC_GRAMMAR))
        return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()
    return accepts


def post(server, body, path="/v1/responses"):
    response = httpx.post(server.base_url + path, json=body, timeout=300)
    return response.status_code, response.json()


def codex_body(*items) -> dict:
    return {**CODEX, "input": [additional_tools_item(), ASK, *items]}


def assert_exec_call(item, lark_accepts):
    assert item["type"] == "custom_tool_call" and item["name"] == "exec" and item["namespace"] == "functions"
    assert item["call_id"] and item["status"] == "completed" and isinstance(item["input"], str)
    assert re.fullmatch(lark_to_regex(EXEC_GRAMMAR), item["input"]), item["input"]
    assert lark_accepts(item["input"]), item["input"]


@pytest.fixture(scope="module")
def first_turn(server):
    status, body = post(server, codex_body())
    assert status == 200, body
    return body


def test_codex_exec_call_validates_against_its_grammar(first_turn, lark_accepts):
    assert first_turn["status"] == "completed"
    calls = [item for item in first_turn["output"] if item["type"] != "reasoning"]
    assert len(calls) == 1
    assert_exec_call(calls[0], lark_accepts)


def test_streamed_input_events(server, first_turn, lark_accepts):
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**codex_body(), "stream": True},
                      timeout=300) as response:
        assert response.status_code == 200
        events = parse_sse(response.read().decode())
    check_event_stream(events)
    kinds = [event["type"] for event in events]
    assert not any(kind.startswith("response.function_call") for kind in kinds)
    deltas = [event["delta"] for event in events if event["type"] == "response.custom_tool_call_input.delta"]
    done = next(event for event in events if event["type"] == "response.custom_tool_call_input.done")
    item = next(event["item"] for event in events if event["type"] == "response.output_item.done")
    assert deltas and "".join(deltas) == done["input"] == item["input"]
    assert done["item_id"] == item["id"] and item["id"].startswith("ctc")
    assert item["input"] == first_turn["output"][-1]["input"]  # same request at temperature 0
    assert_exec_call(item, lark_accepts)
    assert kinds[-1] == "response.completed"


def test_resent_call_and_output_render_the_same_prefix(server, first_turn):
    call = first_turn["output"][-1]
    resent = {key: call[key] for key in ("type", "call_id", "name", "input", "namespace")}
    output = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "a.txt\nb.txt"}
    status, second = post(server, {**codex_body(resent, output), "tool_choice": "auto", "max_output_tokens": 4})
    assert status == 200, second
    usage = first_turn["usage"]
    gap = usage["input_tokens"] + usage["output_tokens"] - second["usage"]["input_tokens_details"]["cached_tokens"]
    assert 0 <= gap <= MAX_CACHE_GAP


def ws_create(socket, body) -> list[dict]:
    socket.send(json.dumps({"type": "response.create", **body}))
    frames = [json.loads(socket.recv(timeout=300))]
    while frames[-1]["type"] not in ("response.completed", "response.incomplete", "response.failed", "error"):
        frames.append(json.loads(socket.recv(timeout=300)))
    return frames


def test_websocket_follow_up_with_only_the_tool_output(server, first_turn, lark_accepts):
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses") as socket:
        first = check_event_stream(ws_create(socket, codex_body()))
        call = first["output"][-1]
        assert_exec_call(call, lark_accepts)
        output = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "a.txt"}
        second = check_event_stream(ws_create(socket, {**CODEX, "previous_response_id": first["id"], "input": [output],
                                                       "tool_choice": "auto", "max_output_tokens": 4}))
    usage = first["usage"]
    assert usage["input_tokens"] + usage["output_tokens"] - second["usage"]["input_tokens_details"]["cached_tokens"] \
        <= MAX_CACHE_GAP
    assert second["usage"]["input_tokens"] > usage["input_tokens"] + usage["output_tokens"]


def test_unenforceable_grammar_is_a_400(server):
    tool = {"type": "custom", "name": "calc", "format": {"type": "grammar", "syntax": "lark", "definition": RECURSIVE}}
    status, body = post(server, {**CODEX, "input": "1", "tools": [tool], "tool_choice": "auto"})
    assert status == 400 and body["error"]["param"] == "tools"
    assert "calc" in body["error"]["message"] and "recursive" in body["error"]["message"]
    chat_tool = {"type": "custom", "custom": {"name": "calc", "format": {"type": "grammar", "grammar": {
        "syntax": "regex", "definition": "(?=x)x"}}}}
    status, body = post(server, {"model": "smollm2", "messages": [{"role": "user", "content": "1"}],
                                 "tools": [chat_tool], "max_tokens": 4}, "/v1/chat/completions")
    assert status == 400 and "calc" in body["error"]["message"], body

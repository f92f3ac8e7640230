"""Issue 13's reproductions on a real server: every hostile body is a 4xx in the route's protocol
shape (never a 5xx or a dropped socket), and a huge body stalls no other request."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from websockets.sync.client import connect

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

KEY = "test-key"
AUTH = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
HI = [{"role": "user", "content": "hi"}]
ROUTES = {  # every POST route and a minimal valid body
    "/v1/chat/completions": {"messages": HI, "max_tokens": 1},
    "/v1/messages": {"messages": HI, "max_tokens": 1},
    "/v1/messages/count_tokens": {"messages": HI},
    "/v1/responses": {"input": "hi", "max_output_tokens": 1},
    "/v1/responses/input_tokens": {"input": "hi"},
    "/v1/responses/compact": {"input": "hi", "max_output_tokens": 1},
    "/v1/tokenize": {"prompt": "hi"},
    "/v1/detokenize": {"tokens": [1]},
}
DEEP = "[" * 1500 + "]" * 1500


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": 1024}, "engine": {"default_max_tokens": 2}, "server": {"api_key": KEY}}
    with ServerProcess(tmp_path_factory.mktemp("hostile"), settings=settings) as proc:
        yield proc


def post(server, path: str, raw, timeout: float = 60) -> httpx.Response:
    content = raw if isinstance(raw, (bytes, str)) else json.dumps(raw)
    return httpx.post(server.base_url + path, content=content, headers=AUTH, timeout=timeout)


def assert_shaped_4xx(response: httpx.Response, path: str, status: int = 400) -> dict:
    """The status, and the error object in the protocol's own shape."""
    assert response.status_code == status, response.text
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("path", ROUTES)
def test_deep_nesting_and_lone_surrogates_are_400_on_every_route(server, path):
    deep = json.dumps(ROUTES[path])[:-1] + ', "x": ' + DEEP + "}"
    assert "deeper than" in assert_shaped_4xx(post(server, path, deep), path)["message"]
    for field in ("model", "user", "prompt_cache_key", "previous_response_id", "truncation", "tool_choice"):
        error = assert_shaped_4xx(post(server, path, {**ROUTES[path], field: "\ud800"}), path)
        assert "lone surrogate" in error["message"] and field in error["message"]


def test_websocket_refuses_deep_and_surrogate_frames_as_error_frames(server):
    url = server.base_url.replace("http", "ws") + "/v1/responses"
    with connect(url, additional_headers={"authorization": f"Bearer {KEY}"}) as socket:
        for frame in ('{"type": "response.create", "input": ' + DEEP + "}",
                      json.dumps({"type": "response.create", "input": "hi", "model": "\ud800"}),
                      json.dumps({"type": "response.create", "input": "hi", "tool_choice": "\udfff"})):
            socket.send(frame)
            error = json.loads(socket.recv(timeout=30))
            assert error["type"] == "error" and error["status"] == 400, error
        socket.send(json.dumps({"type": "response.create", "input": "hi", "max_output_tokens": 1}))
        types = []
        while not types or types[-1] not in ("response.completed", "response.incomplete", "response.failed", "error"):
            types.append(json.loads(socket.recv(timeout=60))["type"])
        assert types[-1] in ("response.completed", "response.incomplete")  # the socket still serves


def test_too_large_body_is_413_with_a_message(server):
    raw = b'{"messages": "' + b"a" * (33 * 1024 * 1024) + b'"}'
    for path in ("/v1/chat/completions", "/v1/messages"):
        error = assert_shaped_4xx(post(server, path, raw, timeout=120), path, status=413)
        assert "max_body_bytes" in error["message"]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": HI, "tools": [
        {"type": "function", "function": {"name": "<|endoftext|>", "parameters": {"type": "object"}}}]}),
    ("/v1/messages", {"messages": HI, "max_tokens": 1, "tools": [
        {"name": "<|endoftext|>", "input_schema": {"type": "object"}}]}),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "<|endoftext|>"}]}),
    ("/v1/chat/completions", {"messages": HI, "tools": [
        {"type": "function", "function": {"name": "a\nb", "parameters": {"type": "object"}}}]}),
])
def test_a_tool_name_the_dialect_cannot_carry_is_a_400_naming_it(server, path, body):
    name = (body["tools"][0].get("function") or body["tools"][0])["name"]
    assert repr(name) in assert_shaped_4xx(post(server, path, body), path)["message"]


@pytest.mark.parametrize("path, extra", [
    ("/v1/chat/completions", {"temperature": "NaN"}), ("/v1/chat/completions", {"top_p": "NaN"}),
    ("/v1/chat/completions", {"min_p": "NaN"}), ("/v1/chat/completions", {"presence_penalty": "NaN"}),
    ("/v1/chat/completions", {"frequency_penalty": "-Infinity"}),
    ("/v1/chat/completions", {"repetition_penalty": "Infinity"}), ("/v1/chat/completions", {"temperature": 2.5}),
    ("/v1/messages", {"temperature": "1e9"}), ("/v1/messages", {"temperature": "Infinity"}),
    ("/v1/messages", {"top_p": "1.5"}), ("/v1/messages", {"temperature": "NaN"}), ("/v1/messages", {"top_k": "-1"}),
    ("/v1/responses", {"temperature": "NaN"}), ("/v1/responses", {"top_p": "Infinity"}),
    ("/v1/responses", {"stream": "1"}), ("/v1/responses", {"store": '"yes"'}),
    ("/v1/responses", {"tool_choice": "3"}), ("/v1/responses", {"tool_choice": '"required"'}),
    ("/v1/responses", {"text": "3"}), ("/v1/responses", {"reasoning": "3"}), ("/v1/responses", {"include": "3"}),
])
def test_out_of_range_and_wrong_type_values_are_400(server, path, extra):
    raw = json.dumps(ROUTES[path])[:-1]
    for key, literal in extra.items():  # raw JSON literals: NaN and Infinity are what Python's parser reads
        raw += f', "{key}": {literal if isinstance(literal, str) else json.dumps(literal)}'
    assert_shaped_4xx(post(server, path, raw + "}"), path)



@pytest.mark.parametrize("path", ROUTES)
def test_integers_past_a_doubles_range_and_invalid_utf8_are_400_on_every_route(server, path):
    body = json.dumps(ROUTES[path])[:-1]
    for extra, expected in ((', "x": ' + "1" * 5000, "5000 digits"), (', "x": -' + "9" * 400, "400 digits")):
        assert expected in assert_shaped_4xx(post(server, path, body + extra + "}"), path)["message"]
    encoded_surrogate = (body + ', "user": "a').encode() + b"\xed\xa0\x80" + b'"}'
    assert "not valid UTF-8" in assert_shaped_4xx(post(server, path, encoded_surrogate), path)["message"]


@pytest.mark.parametrize("path, key", [("/v1/chat/completions", "temperature"),
                                       ("/v1/chat/completions", "presence_penalty"),
                                       ("/v1/messages", "temperature"), ("/v1/responses", "top_p")])
@pytest.mark.parametrize("literal", [str(10 ** 300), "1e400", "-1e400"])
def test_a_number_too_large_for_its_field_is_400(server, path, key, literal):
    raw = json.dumps(ROUTES[path])[:-1] + f', "{key}": {literal}}}'
    assert_shaped_4xx(post(server, path, raw), path)


def test_an_infinite_repetition_penalty_is_400(server):
    raw = json.dumps(ROUTES["/v1/chat/completions"])[:-1] + ', "repetition_penalty": 1e400}'
    assert "finite" in assert_shaped_4xx(post(server, "/v1/chat/completions", raw), "/v1/chat/completions")["message"]

def test_unknown_messages_route_answers_in_anthropic_shape(server):
    response = httpx.get(server.base_url + "/v1/messages/nope", headers=AUTH)
    assert response.status_code == 404 and response.json()["type"] == "error"


def test_metrics_needs_the_key_and_health_does_not(server):
    assert httpx.get(server.base_url + "/metrics").status_code == 401
    assert httpx.get(server.base_url + "/schema/openapi.json").status_code == 401
    assert httpx.get(server.base_url + "/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(server.base_url + "/metrics", headers=AUTH).status_code == 200
    assert httpx.get(server.base_url + "/health").status_code == 200


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_a_huge_prompt_is_refused_untokenized_and_stalls_nobody(server):
    before = rss_bytes(server.proc.pid)
    huge = {"messages": [{"role": "user", "content": "word " * 6_000_000}]}  # 30 MB
    outcome = {}

    def send_huge():
        outcome["response"] = post(server, "/v1/chat/completions", huge, timeout=120)

    sender = threading.Thread(target=send_huge)
    sender.start()
    slowest = 0.0
    while sender.is_alive():
        started = time.monotonic()
        assert post(server, "/v1/tokenize", {"prompt": "hello"}).status_code == 200
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.02)
    sender.join()
    error = assert_shaped_4xx(outcome["response"], "/v1/chat/completions")
    assert error["code"] == "context_length_exceeded" and "at least" in error["message"]
    assert slowest < 1.0
    response = post(server, "/v1/messages", {**huge, "max_tokens": 1}, timeout=120)
    assert "prompt is too long" in assert_shaped_4xx(response, "/v1/messages")["message"]
    response = post(server, "/v1/tokenize", {"prompt": "word " * 6_000_000}, timeout=120)
    error = assert_shaped_4xx(response, "/v1/tokenize")
    assert error["code"] == "context_length_exceeded"
    assert rss_bytes(server.proc.pid) - before < 512 * 1024 * 1024  # nothing giant is kept


@pytest.mark.parametrize("path, key", [("/v1/chat/completions", "stop"), ("/v1/messages", "stop_sequences")])
def test_stop_lists_past_the_limits_are_400_and_a_list_at_them_is_served(server, path, key):
    from kvgate.core.pipeline.stop_strings import MAX_STOP_CHARS, MAX_STOP_STRINGS

    body = ROUTES[path]
    many = {**body, key: [f"stop{i}" for i in range(MAX_STOP_STRINGS + 1)]}
    assert str(MAX_STOP_STRINGS) in assert_shaped_4xx(post(server, path, many), path)["message"]
    long = {**body, key: ["x" * (MAX_STOP_CHARS + 1)]}
    assert str(MAX_STOP_CHARS) in assert_shaped_4xx(post(server, path, long), path)["message"]
    at_limits = {**body, key: [f"{i:02d}" + "x" * (MAX_STOP_CHARS - 2) for i in range(MAX_STOP_STRINGS)]}
    assert post(server, path, at_limits).status_code == 200

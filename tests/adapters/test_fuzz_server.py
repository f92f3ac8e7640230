"""Fuzzing every route of a real server: each generated request gets a 2xx or a 4xx in its
protocol's shape, never a 5xx, and the server keeps serving.

The app's own OpenAPI document (``/schema/openapi.json``) names the routes; it has no request
bodies (handlers read raw JSON), so bodies come from :mod:`tests.adapters.fuzz_bodies`, one
strategy per POST route, and the test checks that every POST route in the document has one.
About 300 requests in all; ``engine.default_max_tokens`` keeps generations short.
"""

from __future__ import annotations

import json
from collections import Counter
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from tests.adapters.fuzz_bodies import RESPONSES, ROUTE_BODIES, TEXTS
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

KEY = "fuzz-key"
HEADERS = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
PER_ROUTE = 36
FUZZ = settings(max_examples=PER_ROUTE, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
COUNTS: Counter = Counter()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings_ = {"model": {"max_context": 512}, "engine": {"default_max_tokens": 2},
                 "server": {"api_key": KEY}, "responses": {}}
    with ServerProcess(tmp_path_factory.mktemp("fuzz"), settings=settings_) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base_url, headers=HEADERS, timeout=120) as http:
        yield http


def check(response: httpx.Response, path: str) -> None:
    """2xx, or a 4xx whose body is the protocol's error object."""
    COUNTS["requests"] += 1
    status = response.status_code
    COUNTS["5xx"] += status >= 500
    COUNTS["2xx"] += status < 300
    assert status < 500, f"{status} on {path}: {response.text[:500]}"
    if status < 400:
        return
    error = response.json()
    if path.startswith("/v1/messages"):
        assert error["type"] == "error" and set(error["error"]) == {"type", "message"}, error
    else:
        assert set(error["error"]) == {"message", "type", "param", "code"}, error


def send(client: httpx.Client, path: str, body) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # NaN, lone surrogates as escapes
    with client.stream("POST", path, content=raw) as response:
        response.read()  # a stream is read to its end: an in-stream failure shows up in its frames
        check(response, path)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            assert b'"api_error"' not in response.content and b'"server_error"' not in response.content


def test_the_openapi_document_lists_only_fuzzed_post_routes(server, client):
    paths = client.get("/schema/openapi.json").json()["paths"]
    posts = {path if path.startswith("/v1") else "/v1" + path for path, ops in paths.items() if "post" in ops}
    assert posts == set(ROUTE_BODIES)


@pytest.mark.parametrize("path", sorted(ROUTE_BODIES))
def test_fuzzed_bodies_never_get_a_5xx(client, path):
    @FUZZ
    @given(ROUTE_BODIES[path] | st.binary(max_size=64))
    def run(body):
        send(client, path, body)

    run()


@settings(max_examples=24, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(RESPONSES, min_size=1, max_size=3))
def test_fuzzed_websocket_frames_get_answers_not_a_dropped_socket(server, frames):
    url = server.base_url.replace("http", "ws") + "/v1/responses"
    with connect(url, additional_headers={"authorization": f"Bearer {KEY}"}) as socket:
        for frame in frames:
            socket.send(json.dumps({"type": "response.create", **frame}))
            COUNTS["requests"] += 1
            while True:
                event = json.loads(socket.recv(timeout=120))
                if event["type"] == "error":
                    COUNTS["5xx"] += event["status"] >= 500
                    assert event["status"] < 500, event
                    break
                if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                    assert event["type"] != "response.failed" or \
                        event["response"]["error"]["code"] != "server_error", event
                    break


@settings(max_examples=20, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXTS, st.sampled_from(["/v1/responses/{}", "/v1/responses/{}/input_items", "/v1/models/{}",
                               "/v1/messages/{}"]))
def test_fuzzed_paths_get_no_5xx(client, name, template):
    path = template.format(quote(name.encode("utf-8", "surrogatepass"), safe=""))  # any bytes, percent-encoded
    for method in ("GET", "DELETE"):
        response = client.request(method, path)
        COUNTS["requests"] += 1
        COUNTS["5xx"] += response.status_code >= 500
        assert response.status_code < 500, response.text


def test_the_server_still_serves_after_the_fuzzing(server, client):
    assert httpx.get(server.base_url + "/health").json()["status"] == "ok"
    answer = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200
    print(f"\nfuzzed {COUNTS['requests']} requests: {COUNTS['2xx']} answered over HTTP with 2xx, "
          f"{COUNTS['5xx']} server errors")
    assert COUNTS["requests"] >= 250 and COUNTS["5xx"] == 0
    assert COUNTS["2xx"] >= 30  # the bodies reach generation, not only the validators

"""The engine through the real server: continuous batching, cancellation, a full queue."""

import json
import threading
import time

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
LONG = {"model": "smollm2", "temperature": 0, "max_tokens": 120, "stream": True,
        "messages": [{"role": "user", "content": "Write a long story about a dragon who learns to cook."}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"engine": {"max_queue": 2, "max_batch": 4}, "cache": {"enabled": False}}
    with ServerProcess(tmp_path_factory.mktemp("engine"), settings) as proc:
        yield proc


def wait_idle(server, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        health = httpx.get(server.base_url + "/health").json()
        if health["requests_in_flight"] == 0:
            return health
        time.sleep(0.1)
    raise AssertionError(f"engine still busy: {health}")


def stream_chunks(response):
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def test_new_request_joins_the_running_batch(server):
    wait_idle(server)
    events = []
    first_token = threading.Event()

    def long_request():
        with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=LONG, timeout=120) as response:
            for chunk in stream_chunks(response):
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    first_token.set()
            events.append(("long done", time.monotonic()))

    thread = threading.Thread(target=long_request)
    thread.start()
    assert first_token.wait(60)
    short = {**LONG, "stream": False, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=short, timeout=60)
    events.append(("short done", time.monotonic()))
    thread.join(120)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] <= 3
    assert [name for name, _ in sorted(events, key=lambda e: e[1])] == ["short done", "long done"]


def test_client_disconnect_cancels_and_frees_state(server):
    before = wait_idle(server)["kv_pool"]
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=LONG, timeout=60) as response:
        chunks = stream_chunks(response)
        next(chunks), next(chunks)
    after = wait_idle(server)["kv_pool"]
    assert after["blocks_free"] == before["blocks_free"]
    metrics = httpx.get(server.base_url + "/metrics").text
    assert 'kvgate_requests_total{reason="cancelled"}' in metrics


def test_full_queue_answers_503_with_retry_after(server):
    wait_idle(server)
    streams = []
    try:
        for _ in range(2):
            cm = httpx.stream("POST", server.base_url + "/v1/chat/completions", json=LONG, timeout=60)
            response = cm.__enter__()
            streams.append(cm)
            assert response.status_code == 200
        refused = httpx.post(server.base_url + "/v1/chat/completions", json={**LONG, "stream": False}, timeout=30)
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "overloaded"
    finally:
        for cm in streams:
            cm.__exit__(None, None, None)
    wait_idle(server)
    ok = httpx.post(server.base_url + "/v1/chat/completions",
                    json={**LONG, "stream": False, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200


def test_ignore_eos_runs_to_the_token_limit(server):
    wait_idle(server)
    body = {"model": "smollm2", "temperature": 0, "max_tokens": 40, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Say OK."}]}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120).json()
    assert reply["usage"]["completion_tokens"] == 40 and reply["choices"][0]["finish_reason"] == "length"
    plain = httpx.post(server.base_url + "/v1/chat/completions", json={**body, "ignore_eos": False}, timeout=120)
    assert plain.json()["usage"]["completion_tokens"] < 40

"""Operations on a real server with the defaults: the embedded model's long context, one count
per request on every protocol (scraped from /metrics), any model name, failure reasons in the
request log."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
HELLO = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"cache": {"enabled": False}, "server": {"log_requests": True}}
    with ServerProcess(tmp_path_factory.mktemp("operations"), settings) as proc:
        yield proc


def scrape(server) -> dict[str, float]:
    """Every sample of /metrics, keyed ``name{label=value,...}``."""
    samples = {}
    for family in text_string_to_metric_families(httpx.get(server.base_url + "/metrics").text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def sse(response) -> list[tuple[str, dict]]:
    events, name = [], ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and line != "data: [DONE]":
            events.append((name, json.loads(line[6:])))
    return events


def stream(server, path, body, headers=None):
    with httpx.stream("POST", server.base_url + path, json=body, headers=headers, timeout=120) as response:
        assert response.status_code == 200
        return sse(response)


def chat(server, streamed):
    body = {"model": "smollm2", "messages": HELLO, "max_tokens": 4, "temperature": 0}
    if streamed:
        events = stream(server, "/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
        usage = [e for _, e in events if e.get("usage")][-1]["usage"]
    else:
        usage = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120).json()["usage"]
    return usage["prompt_tokens"], usage["completion_tokens"]


def responses(server, streamed):
    body = {"model": "gpt-5", "input": "Say hi.", "max_output_tokens": 4, "temperature": 0}
    if streamed:
        final = [e for name, e in stream(server, "/v1/responses", {**body, "stream": True})
                 if name in ("response.completed", "response.incomplete")][-1]["response"]
    else:
        final = httpx.post(server.base_url + "/v1/responses", json=body, timeout=120).json()
    assert final["model"] == "gpt-5"  # any name is served, answered under that name
    return final["usage"]["input_tokens"], final["usage"]["output_tokens"]


def responses_websocket(server, streamed):
    """``streamed`` False: a ``generate: false`` warm-up (prefill only, still one request)."""
    body = {"type": "response.create", "model": "gpt-5", "input": "Say hi.", "max_output_tokens": 4,
            **({} if streamed else {"generate": False})}
    with connect(server.base_url.replace("http", "ws") + "/v1/responses") as socket:
        socket.send(json.dumps(body))
        while True:
            frame = json.loads(socket.recv(timeout=120))
            if frame["type"] in ("response.completed", "response.incomplete"):
                usage = frame["response"]["usage"]
                return usage["input_tokens"], usage["output_tokens"]
            assert frame["type"] not in ("error", "response.failed"), frame


def anthropic(server, streamed):
    body = {"model": "claude-opus-4-8", "max_tokens": 4, "messages": HELLO}
    headers = {"anthropic-version": "2023-06-01"}
    if streamed:
        events = stream(server, "/v1/messages", {**body, "stream": True}, headers)
        start = next(e for name, e in events if name == "message_start")["message"]
        assert start["model"] == "claude-opus-4-8"
        return start["usage"]["input_tokens"], [e for name, e in events if name == "message_delta"][-1]["usage"]["output_tokens"]
    message = httpx.post(server.base_url + "/v1/messages", json=body, headers=headers, timeout=120).json()
    assert message["model"] == "claude-opus-4-8"
    return message["usage"]["input_tokens"], message["usage"]["output_tokens"]


def test_the_embedded_model_serves_a_long_context_and_says_so(server):
    assert "serving 32768 tokens of context, 4x the trained 8192, through YaRN" in server.log()
    assert "context 32768" in server.log()


@pytest.mark.parametrize("protocol,streamed", [(chat, False), (chat, True), (responses, False), (responses, True),
                                               (responses_websocket, True), (responses_websocket, False),
                                               (anthropic, False), (anthropic, True)],
                         ids=["chat", "chat-stream", "responses", "responses-stream", "responses-ws",
                              "responses-ws-warm-up", "anthropic", "anthropic-stream"])
def test_each_request_is_counted_once(server, protocol, streamed):
    before = scrape(server)
    prompt, generated = protocol(server, streamed)
    after = scrape(server)

    def delta(prefix):
        return sum(value - before.get(key, 0) for key, value in after.items() if key.startswith(prefix))

    assert delta("vllm:request_success_total") == 1 and delta("kvgate_requests_total") == 1
    assert delta('vllm:request_success_total{finished_reason=cancelled}') == 0
    assert delta("vllm:prompt_tokens_total") == prompt > 0
    assert delta("kvgate_prompt_tokens_total{source=computed}") == prompt  # the cache is off
    assert delta("vllm:generation_tokens_total") == delta("kvgate_generation_tokens_total") == generated
    assert (generated > 0) == (protocol is not responses_websocket or streamed)


def test_failures_are_logged_with_their_reason(server):
    bad = httpx.post(server.base_url + "/v1/chat/completions", json={"messages": "nope"}, timeout=30)
    assert bad.status_code == 400
    message = bad.json()["error"]["message"]
    assert server.wait_for_log(f"POST /v1/chat/completions 400"), server.log()[-2000:]
    line = next(l for l in server.log().splitlines() if "POST /v1/chat/completions 400" in l)
    assert message[:60] in line and "WARNING" in line
    missing = httpx.get(server.base_url + "/v1/responses/resp_nope", timeout=30)
    assert missing.status_code == 404 and server.wait_for_log("GET /v1/responses/resp_nope 404 ")
    overflow = {"input": "story " * 34000, "max_output_tokens": 4, "stream": True}
    events = stream(server, "/v1/responses", overflow)
    assert events[-1][0] == "response.failed"
    assert server.wait_for_log("stream ended in an error: context_length_exceeded"), server.log()[-2000:]


def test_an_abandoned_stream_is_logged_as_cancelled_with_when(server):
    body = {"messages": HELLO, "max_tokens": 2000, "temperature": 1.0, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_lines())  # the stream is under way; then the client leaves
    assert server.wait_for_log("cancelled: the client left after", timeout=30), server.log()[-2000:]
    line = next(l for l in server.log().splitlines() if "cancelled: the client left after" in l)
    assert "POST /v1/chat/completions 200" in line
    left = float(line.rsplit("after ", 1)[1].rstrip("s"))
    took = float(line.split("POST /v1/chat/completions 200 ")[1].split("s ")[0])
    assert 0 < left <= took


def test_with_the_cache_off_the_page_data_and_gauges_still_answer(server):
    body = {"model": "smollm2", "messages": HELLO, "max_tokens": 2, "temperature": 0}
    assert httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300).status_code == 200
    data = httpx.get(server.base_url + "/v1/cache/overview", timeout=30)
    assert data.status_code == 200, data.text
    assert data.json()["tiers"] == [] and data.json()["almost_hits"] == []
    assert data.json()["requests"][0]["completion_tokens"] == 2
    assert "kvgate_requests_running{}" in scrape(server)

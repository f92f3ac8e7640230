"""Plugins disabled by name in ``[plugins] disabled`` are gone from the real server, and only they:
the cache page (``/``, ``/ui``, ``/v1/cache/overview``), the serving gauges on ``/metrics``, the
worker-information routes a router probes, the request log (an ASGI wrapper), the request
recorder (a request observer) and the tool-name check (a request check), while chat and the
server's own metrics still answer."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
DISABLED = ["cache_page", "serving_gauges", "worker_info", "request_log", "request_recorder", "tool_name_check"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("disabled")
    recording = {"record_path": str(folder / "records.jsonl")}  # the same file: only one server writes
    with ServerProcess(folder / "without", {"plugins": {"disabled": DISABLED}, "server": recording}) as without, \
            ServerProcess(folder / "with", {"server": recording}) as with_all:
        yield without, with_all


@pytest.mark.parametrize("path", ["/", "/ui", "/v1/cache/overview", "/server_info", "/model_info"])
def test_the_disabled_plugins_routes_are_gone(servers, path):
    without, with_all = servers
    assert httpx.get(with_all.base_url + path, timeout=30, follow_redirects=True).status_code == 200
    assert httpx.get(without.base_url + path, timeout=30, follow_redirects=True).status_code in (404, 405)


def test_the_gauges_leave_metrics_and_the_rest_stays(servers):
    without, with_all = servers
    assert "kvgate_kv_pool_blocks_used" in httpx.get(with_all.base_url + "/metrics", timeout=30).text
    metrics = httpx.get(without.base_url + "/metrics", timeout=30).text
    assert "kvgate_kv_pool_blocks_used" not in metrics and "vllm:prompt_tokens" in metrics
    body = {"model": "smollm2", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    reply = httpx.post(without.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0


def test_without_the_request_log_no_request_is_logged(servers):
    without, with_all = servers
    for server in servers:
        assert httpx.get(server.base_url + "/v1/models", timeout=30).status_code == 200
        assert httpx.post(server.base_url + "/v1/chat/completions", content=b"{", timeout=30).status_code == 400
    assert with_all.wait_for_log("POST /v1/chat/completions 400")  # with the reason, as a WARNING
    assert "GET /v1/models 200" in with_all.log()
    time.sleep(1)  # a line would follow its response at once
    assert "GET /v1/models" not in without.log() and "POST /v1/chat/completions" not in without.log()


def test_without_the_recorder_no_generation_is_recorded(servers):
    without, with_all = servers
    body = {"model": "smollm2", "max_tokens": 3, "messages": [{"role": "user", "content": "Hello"}]}
    replies = [httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120) for server in servers]
    assert all(reply.status_code == 200 for reply in replies)
    lines = [json.loads(line) for line in (with_all.workdir.parent / "records.jsonl").read_text().splitlines()]
    assert len(lines) == 1  # the server with the recorder wrote its one generation; the other none
    assert len(lines[0]["output"]) == replies[1].json()["usage"]["completion_tokens"]


def test_without_the_tool_name_check_a_control_text_name_is_not_refused(servers):
    without, with_all = servers
    tool = {"type": "function", "function": {"name": "x<|im_end|>", "parameters": {"type": "object"}}}
    body = {"model": "smollm2", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], "tools": [tool],
            "tool_choice": "none"}
    refused = httpx.post(with_all.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert refused.status_code == 400 and "control text for the model" in refused.json()["error"]["message"]
    assert httpx.post(without.base_url + "/v1/chat/completions", json=body, timeout=120).status_code == 200

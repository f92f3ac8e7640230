"""Two real kvgate workers behind the real SMG router (``smg launch --policy cache_aware``), over HTTP.

Everything listens on 127.0.0.1 and stops by itself. The workers need an API key: SMG is given the
same key with ``--api-key`` (it guards SMG's own routes too and is sent to the workers' probes),
and clients send it through SMG as a Bearer token, which SMG forwards.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.harness import ServerProcess
from tests.scaleout.smg_router import SmgRouter

pytestmark = pytest.mark.slow

KEY = "sk-worker-test"
AUTH = {"authorization": f"Bearer {KEY}"}
SYSTEM = "You are a careful assistant who answers briefly and plainly. " * 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("smg")
    settings = {"server": {"api_key": KEY}, "engine": {"default_max_tokens": 16}}
    workers = [ServerProcess(root / name, settings) for name in ("a", "b")]
    try:
        for worker in workers:
            worker.start()
        with SmgRouter(root / "router", [w.base_url for w in workers], api_key=KEY) as router:
            yield router, workers
    finally:
        for worker in workers:
            worker.stop()


def test_probe_routes_report_the_live_server(cluster):
    _router, (worker, _other) = cluster
    models = httpx.get(worker.base_url + "/v1/models", headers=AUTH).json()
    server = httpx.get(worker.base_url + "/server_info", headers=AUTH).json()
    model = httpx.get(worker.base_url + "/model_info", headers=AUTH).json()
    assert models["data"][0]["max_model_len"] == server["max_model_len"] == model["max_context_length"] > 0
    assert model["is_generation"] is True and model["architecture"] == "llama"
    assert server["page_size"] == 16 and server["max_running_requests"] == 16
    assert httpx.get(worker.base_url + "/server_info").status_code == 401  # the key is required
    assert httpx.get(worker.base_url + "/version", headers=AUTH).json()["version"]


def test_loads_count_a_request_in_flight(cluster):
    _router, (worker, _other) = cluster
    seen: list[dict] = []
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Count from one to a hundred."}],
            "max_tokens": 96, "temperature": 0, "stream": True}

    def stream() -> None:
        with httpx.stream("POST", worker.base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120) as reply:
            for _ in reply.iter_lines():
                pass

    thread = threading.Thread(target=stream)
    thread.start()
    deadline = time.time() + 60
    while thread.is_alive() and time.time() < deadline:
        seen.append(httpx.get(worker.base_url + "/v1/loads", headers=AUTH).json()["loads"][0])
        time.sleep(0.05)
    thread.join()
    idle = httpx.get(worker.base_url + "/loads?model=smollm2", headers=AUTH).json()["loads"][0]
    assert any(load["num_running_reqs"] + load["num_waiting_reqs"] >= 1 for load in seen)
    assert any(load["token_usage"] > 0 for load in seen)
    assert idle["num_running_reqs"] == idle["num_waiting_reqs"] == 0


def test_smg_registers_both_workers_with_their_context(cluster):
    router, workers = cluster
    registered = httpx.get(router.base_url + "/workers", headers=router.headers).json()["workers"]
    assert sorted(w["url"] for w in registered) == sorted(w.base_url for w in workers)
    served = httpx.get(workers[0].base_url + "/v1/models", headers=AUTH).json()["data"][0]["max_model_len"]
    assert all(w["models"][0]["context_length"] == served for w in registered)


def test_a_conversation_stays_on_one_worker_and_hits_its_cache(cluster):
    router, _workers = cluster
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi."}]
    routed, usages = [], []
    for turn in range(3):
        reply = httpx.post(router.base_url + "/v1/chat/completions", headers=AUTH, timeout=180,
                           json={"model": "smollm2", "messages": messages, "max_tokens": 8, "temperature": 0})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        routed.append(reply.headers["x-smg-routed-worker-id"])
        usages.append(body["usage"])
        messages += [{"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"And what about turn {turn + 2}?"}]
    assert len(set(routed)) == 1
    for previous, usage in zip(usages, usages[1:]):
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert cached >= previous["prompt_tokens"] - 16 and usage["kvgate"]["cached_tokens_device"] == cached


def test_responses_and_messages_pass_through_with_smg_defaults(cluster):
    router, _workers = cluster
    responses = httpx.post(router.base_url + "/v1/responses", headers=AUTH, timeout=120,
                           json={"model": "smollm2", "input": "Say hi.", "max_output_tokens": 8})
    assert responses.status_code == 200, responses.text
    assert responses.json()["object"] == "response" and responses.json()["output"]
    messages = httpx.post(router.base_url + "/v1/messages", timeout=120,
                          headers={**AUTH, "anthropic-version": "2023-06-01"},
                          json={"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})
    assert messages.status_code == 200, messages.text
    assert messages.json()["type"] == "message" and messages.json()["content"]

"""A real kvgate worker behind the real SMG router in gRPC mode (``grpc://`` worker URL).

SMG registers the worker over gRPC (HealthCheck, GetModelInfo, GetServerInfo, GetLoads,
SubscribeKvEvents, GetTokenizer), renders and tokenizes chat requests itself and routes on the
worker's KV events. Everything listens on 127.0.0.1 and stops by itself. The worker runs in
deterministic mode, so a prefix-cache hit cannot change its greedy output.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.harness import ServerProcess, free_port
from tests.scaleout.smg_router import SmgRouter

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SYSTEM = "You are a careful assistant who answers briefly and plainly. " * 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("smg-grpc")
    grpc_port = free_port()
    settings = {"engine": {"deterministic": True, "default_max_tokens": 16}, "cache": {"ssd_enabled": False},
                "grpc": {"enabled": True, "port": grpc_port}}
    worker = ServerProcess(root / "worker", settings)
    try:
        worker.start()
        with SmgRouter(root / "router", [f"grpc://127.0.0.1:{grpc_port}"]) as router:
            deadline = time.monotonic() + 60
            while "Successfully loaded tokenizer" not in router_log(router) and time.monotonic() < deadline:
                time.sleep(0.2)  # the gateway fetches the tokenizer after the worker registers
            yield router, worker
    finally:
        worker.stop()


def router_log(router: SmgRouter) -> str:
    return ANSI.sub("", router.log())


def chat(base_url: str, messages: list[dict], **extra) -> dict:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 16, "temperature": 0, **extra}
    reply = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=180)
    assert reply.status_code == 200, reply.text
    return reply.json()


def branch_count(router: SmgRouter, branch: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{router.metrics_port}/metrics", timeout=10).text
    found = re.search(rf'smg_cache_aware_policy_branch_total{{branch="{branch}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_smg_registers_the_grpc_worker_with_its_tokenizer(cluster):
    router, _worker = cluster
    workers = httpx.get(router.base_url + "/workers", timeout=10).json()["workers"]
    assert len(workers) == 1 and workers[0]["url"].startswith("grpc://")
    assert "Tokenizer bundle validation passed" in router_log(router)  # GetTokenizer's zip and sha256 were accepted


def test_a_chat_through_smg_answers_as_kvgate_does_over_http(cluster):
    router, worker = cluster
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    through_smg = chat(router.base_url, messages)
    direct = chat(worker.base_url, messages)
    text = through_smg["choices"][0]["message"]["content"]
    assert text and text == direct["choices"][0]["message"]["content"]
    assert through_smg["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]  # the same template
    assert through_smg["choices"][0]["finish_reason"] == direct["choices"][0]["finish_reason"]


def test_a_stop_string_through_smg_ends_the_answer_before_it(cluster):
    router, _worker = cluster
    messages = [{"role": "user", "content": "Describe the sea in one sentence."}]
    free = chat(router.base_url, messages)["choices"][0]["message"]["content"]
    stop = free.split()[3]
    stopped = chat(router.base_url, messages, stop=[stop])["choices"][0]
    assert stopped["finish_reason"] == "stop" and free.startswith(stopped["message"]["content"])
    assert stop not in stopped["message"]["content"]


def test_streaming_through_smg_ends_with_a_finish_reason(cluster):
    router, _worker = cluster
    # a prompt SmolLM2 answers in ~11 tokens whichever arithmetic ("Say hello." rambles in emoji to 66)
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Greet me in one short sentence."}],
            "max_tokens": 64, "temperature": 0, "stream": True}
    with httpx.stream("POST", router.base_url + "/v1/chat/completions", json=body, timeout=180) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and any('"content"' in line for line in lines)
    assert any('"finish_reason":"stop"' in line for line in lines)  # the worker stopped on EOS itself


def test_a_shared_prefix_is_routed_on_the_workers_kv_events(cluster):
    router, _worker = cluster
    before = branch_count(router, "event_hit")
    first = chat(router.base_url, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a colour."}])
    time.sleep(0.5)  # the worker's KvBlocksStored reaches SMG's index
    second = chat(router.base_url, [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": "Name an animal."}])
    assert branch_count(router, "event_hit") >= before + 1
    assert "branch=\"event_hit\"" in router_log(router)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < 16
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16 * 16  # the shared prefix's blocks


def test_the_worker_stops_promptly_while_smg_holds_its_event_stream(cluster):
    _router, worker = cluster
    started = time.monotonic()
    worker.stop()
    assert worker.proc.returncode is not None and time.monotonic() - started < 20
    assert "gRPC worker (SglangScheduler) listening" in worker.log()

"""Two real kvgate workers on one shared ``ssd_path``: a conversation moves from one to the other
(directly, and through the real SMG router after its worker is SIGKILLed) and the other restores
its prefix from the shared SSD tier, with the greedy output of a cold run.

A third worker without the SSD tier gives the cold reference. The workers run with
``engine.deterministic`` (bit-identical logits cold, cached or restored), so equal greedy output is
an exact check. Everything listens on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.harness import ServerProcess
from tests.scaleout.smg_router import SmgRouter

pytestmark = pytest.mark.slow

ENGINE = {"default_max_tokens": 16, "deterministic": True}


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared-ssd")
    # reuse_output_ids off: the cold worker, on no shared store, tokenizes a resent reply canonically
    canonical = {"reuse_output_ids": False}
    shared = {"engine": ENGINE, "cache": {"ssd_path": str(root / "shared-ssd")}, "tokenizer_cache": canonical}
    cold = {"engine": ENGINE, "cache": {"ssd_enabled": False}, "tokenizer_cache": canonical}
    servers = [ServerProcess(root / "a", shared), ServerProcess(root / "b", shared), ServerProcess(root / "cold", cold)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def chat(url: str, messages: list[dict], headers: dict | None = None) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", timeout=180, headers=headers or {},
                      json={"model": "smollm2", "messages": messages, "max_tokens": 24, "temperature": 0})


def ssd_state(worker: ServerProcess) -> dict:
    return httpx.get(worker.base_url + "/cache/diagnostics", timeout=30).json()["ssd"]


def wait_for_backup(worker: ServerProcess, after_generation: int) -> None:
    """Until ``worker``'s writer committed a snapshot past ``after_generation`` and is idle."""
    deadline = time.time() + 60
    while time.time() < deadline:
        state = ssd_state(worker)
        if state["generation"] > after_generation and state["pending_bytes"] == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"no SSD backup on {worker.base_url}: {ssd_state(worker)}")


def turn(messages: list[dict], reply: dict, text: str) -> list[dict]:
    return messages + [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                       {"role": "user", "content": text}]


def test_the_next_turn_on_the_other_worker_restores_from_the_shared_ssd(workers):
    a, b, cold = workers
    assert ssd_state(a)["other_live_workers"] == ssd_state(b)["other_live_workers"] == 1
    assert ssd_state(a)["worker"] != ssd_state(b)["worker"]
    messages = [{"role": "system", "content": "You are a patient tutor who explains slowly. " * 50},
                {"role": "user", "content": "What is a prime number?"}]
    before = ssd_state(a)["generation"]
    first = chat(a.base_url, messages)
    assert first.status_code == 200, first.text
    wait_for_backup(a, before)
    messages = turn(messages, first.json(), "And is 91 one?")
    moved, reference = chat(b.base_url, messages), chat(cold.base_url, messages)
    assert moved.status_code == reference.status_code == 200, moved.text
    moved, reference = moved.json(), reference.json()
    previous = first.json()["usage"]["prompt_tokens"]
    assert moved["usage"]["kvgate"]["cached_tokens_ssd"] >= 0.95 * previous
    assert reference["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert moved["choices"][0]["message"]["content"] == reference["choices"][0]["message"]["content"]
    assert moved["usage"]["completion_tokens"] == reference["usage"]["completion_tokens"] > 0


def test_smg_moves_a_conversation_off_a_killed_worker_and_it_resumes_from_ssd(workers, tmp_path):
    a, b, _cold = workers
    by_url = {a.base_url: a, b.base_url: b}
    with SmgRouter(tmp_path / "router", [a.base_url, b.base_url], policy="cache_aware") as router:
        messages = [{"role": "system", "content": "You are a terse release manager for a busy team. " * 50},
                    {"role": "user", "content": "List three release risks."}]
        routed, replies = [], []
        for text in ("Which one is worst?", "How do we test for it?"):
            before = ssd_state(a)["generation"]
            reply = chat(router.base_url, messages)
            assert reply.status_code == 200, reply.text
            routed.append(reply.headers["x-smg-routed-worker-id"])
            replies.append(reply.json())
            wait_for_backup(by_url[routed[-1]], before)
            messages = turn(messages, reply.json(), text)
        assert routed[0] == routed[1]  # cache_aware keeps the conversation on one worker
        holder = by_url[routed[0]]
        survivor = next(w for w in (a, b) if w is not holder)
        holder.kill()  # mid-conversation, as a crash would
        deadline, attempts = time.time() + 90, 0
        while True:
            attempts += 1
            reply = chat(router.base_url, messages)
            if reply.status_code == 200 or time.time() > deadline:
                break
            time.sleep(0.5)  # SMG notices the dead worker (connection refused) and stops picking it
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-smg-routed-worker-id"] == survivor.base_url
        previous = replies[-1]["usage"]["prompt_tokens"]
        assert reply.json()["usage"]["kvgate"]["cached_tokens_ssd"] >= 0.95 * previous, (attempts, reply.json())

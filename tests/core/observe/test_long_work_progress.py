"""Long work shows progress (issue 36): a long prompt's cold prefill, through a real server process,
is listed in ``/health`` (and on the cache page's data) with done/total while it runs, logged as
it starts, moves and ends, and gone once the prompt is in state."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from kvgate.core.observe.progress import LONG_WORK_TOKENS
from tests.core.cache.real_helpers import long_text
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
PROMPT = "Summarise these notes. " + long_text(31, 960)  # about 2,200 tokens


def chat(server, results: dict) -> None:
    body = {"model": "smollm2", "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": PROMPT}]}
    results["reply"] = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=600)


def watch(server, request: threading.Thread) -> tuple[list[dict], list[dict]]:
    """Every prefill row /health listed, and every one the cache page's data listed, while ``request`` ran."""
    seen_health, seen_page = [], []
    while request.is_alive():
        health = httpx.get(server.base_url + "/health", timeout=10).json()
        seen_health += [row for row in health["progress"] if row["kind"] == "prefill"]
        page = httpx.get(server.base_url + "/v1/cache/overview", params={"limit": 1}, timeout=10).json()
        seen_page += [row for row in page["progress"] if row["kind"] == "prefill"]
        time.sleep(0.2)
    return seen_health, seen_page


def test_a_long_prompts_prefill_shows_on_health_while_it_runs(tmp_path):
    with ServerProcess(tmp_path, {"engine": {"prefill_chunk": 256}}) as server:
        assert httpx.get(server.base_url + "/health", timeout=10).json()["progress"] == []
        results: dict = {}
        request = threading.Thread(target=chat, args=(server, results))
        request.start()
        seen_health, seen_page = watch(server, request)
        request.join()
        reply = results["reply"]
        assert reply.status_code == 200, reply.text
        prompt_tokens = reply.json()["usage"]["prompt_tokens"]
        assert prompt_tokens >= LONG_WORK_TOKENS

        assert seen_health, "the prefill never showed on /health"
        assert {row["total"] for row in seen_health} == {prompt_tokens}  # a cold prompt: every token computed
        assert all(row["unit"] == "tokens" and 0 <= row["done"] <= row["total"] for row in seen_health)
        assert any(0 < row["done"] < row["total"] for row in seen_health), "no partial progress was seen"
        dones = [row["done"] for row in seen_health]
        assert dones == sorted(dones)  # it only moves forward
        assert seen_page and {row["id"] for row in seen_page} == {seen_health[0]["id"]}

        assert httpx.get(server.base_url + "/health", timeout=10).json()["progress"] == []
        assert server.wait_for_log("prefill done: request"), server.log()[-3000:]
        log = server.log()
        assert "prefill started: request" in log and f"{prompt_tokens}/{prompt_tokens} tokens in" in log
        assert f"/{prompt_tokens} tokens (" in log  # an intermediate quarter was logged

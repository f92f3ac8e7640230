"""The cache through the real server: device hit, diagnostics route, SSD restore after a restart."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from tests.core.cache.real_helpers import long_text
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SETTINGS = {"cache": {"chunk_tokens": 64, "almost_hit_min_tokens": 64}}


def chat(server, messages):
    body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "temperature": 0}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    return data["choices"][0]["message"]["content"], data["usage"]


def test_device_hit_diagnostics_and_restore_after_restart(tmp_path):
    state = tmp_path / "state"
    messages = [{"role": "system", "content": long_text(41, 120)}, {"role": "user", "content": "Say hello."}]
    with ServerProcess(tmp_path / "one", SETTINGS, state_dir=state) as server:
        answer, usage = chat(server, messages)
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And again."}]
        answer, usage = chat(server, messages)
        assert usage["kvgate"]["cached_tokens_device"] > 200 and usage["kvgate"]["cached_tokens_ssd"] == 0
        diagnostics = httpx.get(server.base_url + "/v1/cache/diagnostics", timeout=30).json()
        assert diagnostics["recent_lookups"][-1]["source"] == "device"
        assert diagnostics["device"]["entries"] >= 1
        metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
        assert 'kvgate:prefix_cache_hits_total{tier="device"}' in metrics
    listing = subprocess.run([sys.executable, "-m", "kvgate.core.cli", "cache", "--path", str(state / "ssd"), "ls"],
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and " 0 snapshots" not in listing.stdout, listing.stdout + listing.stderr
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Once more."}]
    with ServerProcess(tmp_path / "two", SETTINGS, state_dir=state) as server:
        started = time.perf_counter()
        _, usage = chat(server, messages)
        assert usage["kvgate"]["cached_tokens_ssd"] > 200, usage
        assert time.perf_counter() - started < 120

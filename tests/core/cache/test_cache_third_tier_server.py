"""A third-party backup tier through the real server: with the SSD tier off, a request after a
restart is restored from an in-memory tier that a test plugin registers."""

from __future__ import annotations

import httpx
import pytest

from kvgate.core.config import config_from_dict
from kvgate.core.plugins import build_plugin_manager
from tests.core.cache.app_server import AppServer
from tests.core.cache.memory_tier import MemoryStore, MemoryTierPlugin
from tests.core.cache.real_helpers import long_text

pytestmark = pytest.mark.slow


def chat(server, messages):
    body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "temperature": 0}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    return data["choices"][0]["message"]["content"], data["usage"]


def serve(state, store):
    config = config_from_dict({"state_dir": str(state),
                               "cache": {"ssd_enabled": False, "chunk_tokens": 64, "almost_hit_min_tokens": 64,
                                         "cached_tokens_granularity": 1}})  # usage compared with the metric
    return AppServer(config, build_plugin_manager(extra_plugins=[("memory_cache", MemoryTierPlugin(store))]))


def test_a_request_after_a_restart_is_restored_from_a_third_party_tier(tmp_path):
    state, store = tmp_path / "state", MemoryStore()
    messages = [{"role": "system", "content": long_text(43, 120)}, {"role": "user", "content": "Say hello."}]
    with serve(state, store) as server:
        answer, usage = chat(server, messages)
        assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert store.snapshots and store.closed == 1  # backed up, then closed at shutdown
    assert not (state / "ssd").exists()  # the SSD tier is off
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And again."}]
    with serve(state, store) as server:  # a fresh device tier: only the memory tier holds the prefix
        _, usage = chat(server, messages)
        assert usage["kvgate"]["cached_tokens_ssd"] > 200 and usage["kvgate"]["cached_tokens_device"] == 0, usage
        assert store.restored == 1
        diagnostics = httpx.get(server.base_url + "/v1/cache/diagnostics", timeout=30).json()
        assert diagnostics["recent_lookups"][-1]["source"] == "memory" and diagnostics["ssd"] is None
        metrics = httpx.get(server.base_url + "/metrics", timeout=30).text
        label = 'kvgate:prefix_cache_hits_total{tier="memory"}'
        hits = [line for line in metrics.splitlines() if line.startswith(label)]
        assert hits and float(hits[0].split()[-1]) == usage["kvgate"]["cached_tokens_ssd"]

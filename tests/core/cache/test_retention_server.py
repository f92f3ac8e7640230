"""Retention hints against the real server (embedded SmolLM2, a 40-block device tier, no SSD
tier, two tenants): a ``cache_control`` 1h prefix survives a flood of other sessions that evicts
everything unpinned, Anthropic usage reports what the mark wrote, a tenant pins only within its
own part of the pinned share, ``prompt_cache_retention: "24h"`` pins on Chat Completions, and
the pinned bytes are in /metrics and the diagnostics."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

BLOCK_BYTES = 16 * 23040  # 16 tokens of SmolLM2's bf16 KV
KEYS = {"a": "key-a", "b": "key-b", "c": "key-c"}
ADMIN = {"tenant": "ops", "key": "key-ops", "admin": True}  # /metrics needs an admin key
# 40 blocks; 20 may be pinned, 8 of them by each tenant: one ~105-token prefix (7 blocks) each, not two
CACHE = {"device_bytes": 40 * BLOCK_BYTES, "decode_reserve_tokens": 0, "ssd_enabled": False,
         "pinned_share": 0.5, "pinned_tenant_share": 0.4}
WORDS = ["amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "harbor", "island", "juniper", "kelp"]


def text(seed: int, words: int = 35) -> str:
    return f"Session {seed}. " + " ".join(f"{WORDS[(seed * 5 + i * i) % len(WORDS)]}{(seed + i) % 17}"
                                          for i in range(words))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"max_context": 2048, "aliases": ["claude-*"]}, "cache": CACHE,
                "server": {"keys": [{"tenant": name, "key": key} for name, key in KEYS.items()] + [ADMIN]}}
    with ServerProcess(tmp_path_factory.mktemp("retention"), settings=settings) as proc:
        yield proc


def message(server, tenant: str, system: str, question: str, ttl=None) -> dict:
    block = {"type": "text", "text": system, **({"cache_control": {"type": "ephemeral", "ttl": ttl}} if ttl else {})}
    body = {"model": "claude-haiku-4-5", "max_tokens": 1, "system": [block],
            "messages": [{"role": "user", "content": question}]}
    response = httpx.post(server.base_url + "/v1/messages", json=body, headers={"x-api-key": KEYS[tenant]},
                          timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["usage"]


def metric(server, name: str) -> float:
    lines = httpx.get(server.base_url + "/metrics", headers={"authorization": f"Bearer {ADMIN['key']}"},
                      timeout=30).text.splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name))


def diagnostics(server, tenant: str) -> dict:
    return httpx.get(server.base_url + "/v1/cache/diagnostics", headers={"authorization": f"Bearer {KEYS[tenant]}"},
                     timeout=30).json()


def test_a_1h_prefix_survives_a_flood_that_evicts_everything_unpinned(server):
    marked, control = text(1), text(2)
    first = message(server, "a", marked, "Name a fruit.", ttl="1h")
    written = first["cache_creation_input_tokens"]
    assert written > 5 * 16 and first["cache_creation"] == {"ephemeral_5m_input_tokens": 0,
                                                            "ephemeral_1h_input_tokens": written}
    assert first["cache_read_input_tokens"] == 0 and first["input_tokens"] > 0  # the question is not marked
    message(server, "a", control, "Name a fruit.")
    assert message(server, "a", control, "Name a tree.")["cache_read_input_tokens"] > 0  # resident now
    pinned = metric(server, "kvgate_cache_pinned_bytes")
    assert pinned == -(-written // 16) * BLOCK_BYTES
    for seed in range(10, 16):  # other sessions: ~6 x 8 blocks through a 40-block tier
        message(server, "b", text(seed), "Name a city.")
    assert message(server, "a", control, "Name a bird.")["cache_read_input_tokens"] == 0  # evicted
    again = message(server, "a", marked, "Name a colour.", ttl="1h")
    assert again["cache_read_input_tokens"] == written // 16 * 16 and again["cache_creation_input_tokens"] == 0
    pins = diagnostics(server, "a")["pins"]
    assert pins["by_tenant"] == {"a": pinned} and pins["entries"][0]["ttl"] == "1h"
    assert 3590 < pins["entries"][0]["expires_in_s"] <= 3600


def test_a_tenant_pins_only_within_its_own_part(server):
    refused_before = metric(server, 'kvgate_cache_pins_refused_total{reason="tenant_share"}')
    assert message(server, "b", text(3), "Hi.", ttl="5m")["cache_creation"]["ephemeral_5m_input_tokens"] > 0
    over = message(server, "b", text(4), "Hi.", ttl="5m")  # b's part holds one such prefix, not two
    assert over["cache_creation_input_tokens"] == 0 and "cache_creation" not in over
    assert metric(server, 'kvgate_cache_pins_refused_total{reason="tenant_share"}') == refused_before + 1
    assert set(diagnostics(server, "b")["pins"]["by_tenant"]) == {"b"}  # never another tenant's


def test_prompt_cache_retention_24h_pins_the_prompt_on_chat_completions(server):
    before = diagnostics(server, "c")["pins"]
    body = {"model": "smollm2", "max_tokens": 1, "prompt_cache_retention": "24h",
            "messages": [{"role": "system", "content": text(5, 15)}, {"role": "user", "content": "Hi."}]}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body,
                          headers={"authorization": f"Bearer {KEYS['c']}"}, timeout=300)
    assert response.status_code == 200, response.text
    pins = diagnostics(server, "c")["pins"]
    assert pins["pins"] == before["pins"] + 1 and pins["entries"][0]["ttl"] == "24h"
    bad = httpx.post(server.base_url + "/v1/chat/completions", json={**body, "prompt_cache_retention": "1w"},
                     headers={"authorization": f"Bearer {KEYS['c']}"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_cache_retention"

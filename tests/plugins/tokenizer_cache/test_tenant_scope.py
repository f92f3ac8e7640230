"""The tokenizer cache is scoped by tenant (issue 31, finding 8): a text one tenant sent is never a
cache hit for another, so no tenant can time ``count_tokens`` or ``/v1/tokenize`` to learn what
another sent; the same tenant still hits. Asserted through the cache's counters, not timings."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess
from tests.plugins.tokenizer_cache.services import cached_service

KEYS = {"alice": "key-alice", "bob": "key-bob", "ops": "key-ops"}
CHATML = "<|im_start|>user\nthe secret launch code is 4417<|im_end|>\n<|im_start|>assistant\n"


def test_each_namespace_misses_the_others_entries_in_both_layers(small_bpe):
    service = cached_service(small_bpe, special_tokens=["<|im_start|>", "<|im_end|>"])
    alice = service.encode(CHATML, "ns-alice")
    assert service.encode(CHATML, "ns-bob") == alice == service.encode_uncached(CHATML)
    stats = service.cache_stats()
    assert (stats["l0"]["hits"], stats["l0"]["misses"]) == (0, 2)
    assert (stats["l1"]["hits"], stats["l1"]["misses"]) == (0, 2)  # bob's prefixes are not alice's
    assert service.encode(CHATML, "ns-alice") == alice and service.encode(CHATML + "more", "ns-bob")
    stats = service.cache_stats()
    assert stats["l0"]["hits"] == 1 and stats["l1"]["hits"] == 1  # each tenant hits its own


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    keys = [{"tenant": who, "key": key, "admin": who == "ops"} for who, key in KEYS.items()]
    settings = {"server": {"keys": keys}, "cache": {"ssd_enabled": False}}
    with ServerProcess(tmp_path_factory.mktemp("tokenizer-tenants"), settings) as running:
        yield running


def post(server, who: str, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, headers={"Authorization": f"Bearer {KEYS[who]}"},
                       timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def lookups(server) -> dict[tuple[str, str], float]:
    """(layer, result) -> smg_tokenizer_cache_lookups_total, read from /metrics as an operator."""
    text = httpx.get(server.base_url + "/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"},
                     timeout=30).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("smg_tokenizer_cache_lookups_total{"):
            labels = dict(part.split("=") for part in line[line.index("{") + 1:line.index("}")].split(","))
            counts[labels["layer"].strip('"'), labels["result"].strip('"')] = float(line.split()[-1])
    assert counts, "smg_tokenizer_cache_lookups_total not in /metrics"
    return counts


def lookups_during(server, call) -> dict[tuple[str, str], float]:
    before = lookups(server)
    call()
    return {key: value - before[key] for key, value in lookups(server).items() if value != before[key]}


COUNT = "/v1/messages/count_tokens"


@pytest.mark.slow
def test_count_tokens_of_one_tenant_never_hits_another_tenants_text(server):
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "alice's secret: " + "plan " * 3000}]}
    counted = {}

    def count(who):
        return lambda: counted.setdefault(who, []).append(post(server, who, COUNT, body)["input_tokens"])

    assert lookups_during(server, count("alice")) == {("l0", "miss"): 1, ("l1", "miss"): 1}
    assert lookups_during(server, count("alice")) == {("l0", "hit"): 1}
    assert lookups_during(server, count("bob")) == {("l0", "miss"): 1, ("l1", "miss"): 1}
    assert lookups_during(server, count("bob")) == {("l0", "hit"): 1}
    assert counted["alice"] == counted["bob"] and len(set(counted["alice"])) == 1


@pytest.mark.slow
def test_tokenize_of_one_tenant_never_hits_another_tenants_text(server):
    body = {"prompt": "bob's draft letter " * 500}
    assert lookups_during(server, lambda: post(server, "bob", "/v1/tokenize", body))[("l0", "miss")] == 1
    assert lookups_during(server, lambda: post(server, "alice", "/v1/tokenize", body))[("l0", "miss")] == 1
    assert lookups_during(server, lambda: post(server, "bob", "/v1/tokenize", body)) == {("l0", "hit"): 1}

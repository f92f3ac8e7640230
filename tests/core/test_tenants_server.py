"""Tenants kept apart, through the real server with several tenant keys (issue 13, findings 11-12).

Keys: alice (inline), bob (``key_file``), an admin (``key_env``), and carol and dave, who both opt
into the shared namespace "team". Alice's prompt holds "My bank PIN is 4417" behind a system prompt
everyone may know; bob, who knows everything but the PIN, probes for it.
"""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from tests.core.cache.real_helpers import long_text
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
BLOCK = 16  # [engine] block_size: the cache's block, the granularity cached tokens are reported in
KEYS = {"alice": "key-alice", "bob": "key-bob", "admin": "key-admin", "carol": "key-carol", "dave": "key-dave"}
SYSTEM = "You are the assistant of a bank. " + long_text(29, 140)
TEAM_SYSTEM = "You are the assistant of a team. " + long_text(31, 140)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("tenants")
    (work / "bob.key").write_text(KEYS["bob"] + "\n")
    keys = [{"tenant": "alice", "key": KEYS["alice"]},
            {"tenant": "bob", "key_file": str(work / "bob.key")},
            {"tenant": "ops", "key_env": "KVGATE_TEST_ADMIN_KEY", "admin": True},
            {"tenant": "carol", "key": KEYS["carol"], "shared_namespace": "team"},
            {"tenant": "dave", "key": KEYS["dave"], "shared_namespace": "team"}]
    settings = {"server": {"keys": keys}, "cache": {"almost_hit_min_tokens": 64, "ssd_enabled": False}}
    with ServerProcess(work, settings, env={"KVGATE_TEST_ADMIN_KEY": KEYS["admin"]}) as running:
        yield running


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def pin_messages(pin: str, system: str = SYSTEM) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": f"My bank PIN is {pin}."}]


def chat(server, who: str, messages: list[dict], **extra) -> dict:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 0, **extra}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=auth(who), timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]


def cached(usage: dict) -> int:
    return usage["prompt_tokens_details"]["cached_tokens"]


def diagnostics(server, who: str) -> dict:
    reply = httpx.get(server.base_url + "/v1/cache/diagnostics", headers=auth(who), timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_keys_from_toml_file_and_environment_and_a_wrong_key(server):
    for who in KEYS:
        assert httpx.get(server.base_url + "/v1/models", headers=auth(who), timeout=30).status_code == 200
    wrong = httpx.get(server.base_url + "/v1/models", headers={"Authorization": "Bearer key-alicf"}, timeout=30)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"


def test_no_cross_tenant_hit_and_no_pin_oracle(server):
    chat(server, "alice", pin_messages("4417"))
    assert cached(chat(server, "alice", pin_messages("4417"))) > 0  # alice's own prefix is cached
    assert cached(chat(server, "bob", pin_messages("4417"))) == 0  # alice's exact prompt: no hit for bob
    # from here bob's probes only ever meet bob's own earlier prompt: the right digit looks like a wrong one
    right, wrong = cached(chat(server, "bob", pin_messages("4417"[:3] + "7"))), 0
    for digit in "0259":
        wrong = cached(chat(server, "bob", pin_messages("441" + digit)))
        assert wrong == cached(chat(server, "bob", pin_messages("441" + digit))) or wrong % BLOCK == 0
    assert right % BLOCK == 0 and wrong % BLOCK == 0


def forks(report: dict) -> set[tuple[str, str]]:
    """``(first character stored after the fork, first character of the prompt after it)`` of
    every almost-hit whose text is shown: the PIN digits where two PIN prompts part."""
    return {(hit["stored_after"][:1], hit["prompt_after"][:1]) for hit in report["almost_hits"] if "stored_after" in hit}


def test_diagnostics_show_text_to_its_owner_and_the_admin_only(server):
    chat(server, "alice", pin_messages("7301"))
    chat(server, "alice", pin_messages("7306"))  # alice's own near-miss: an almost-hit in her namespace
    chat(server, "bob", pin_messages("7308"))  # bob near-misses alice's prompt ...
    chat(server, "bob", pin_messages("7309"))  # ... and his own
    alice, bob, admin = (diagnostics(server, who) for who in ("alice", "bob", "admin"))
    assert ("1", "6") in forks(alice) and not {c for pair in forks(alice) for c in pair} & {"8", "9"}
    assert ("8", "9") in forks(bob) and not {c for pair in forks(bob) for c in pair} & {"1", "6"}
    assert all("text_redacted" not in hit for hit in bob["almost_hits"])  # bob owns both sides of his own
    assert {("1", "6"), ("8", "9")} <= forks(admin)
    alice_spaces = {hit["namespace"] for hit in alice["almost_hits"] + alice["recent_lookups"]}
    assert not alice_spaces & {hit["namespace"] for hit in bob["almost_hits"] + bob["recent_lookups"]}
    assert not [text for text in strings_in(bob) if "7301" in text]  # numbers (timestamps) may hold the digits


def strings_in(report) -> list[str]:
    """Every string value and key in a JSON report: where a prompt's text could appear."""
    if isinstance(report, dict):
        return [*report, *(text for value in report.values() for text in strings_in(value))]
    if isinstance(report, list):
        return [text for value in report for text in strings_in(value)]
    return [report] if isinstance(report, str) else []


def team_pin(pin: str) -> list[dict]:
    return pin_messages(pin, TEAM_SYSTEM)  # a system prompt nobody outside the team sends


def test_a_shared_namespace_is_opt_in_and_redacts_text(server):
    chat(server, "carol", team_pin("5521"))
    shared = chat(server, "dave", team_pin("5521"))
    assert cached(shared) > 0 and cached(shared) % BLOCK == 0  # opted in: dave reads carol's prefix
    assert cached(chat(server, "alice", team_pin("5521"))) == 0  # not opted in: no hit
    chat(server, "dave", team_pin("5529"))  # a near-miss of carol's (or dave's own) prompt
    # the PIN ends a block here: the right last digit reads like a wrong one, rounded to the block
    assert cached(chat(server, "dave", team_pin("5521"))) == cached(chat(server, "dave", team_pin("5528")))
    hits = diagnostics(server, "dave")["almost_hits"]
    assert hits and all(hit["text_redacted"] and "prompt_after" not in hit for hit in hits)
    assert all(isinstance(hit["fork_index"], int) for hit in hits)  # counts and positions stay
    team_spaces = {hit["namespace"] for hit in hits}
    as_admin = [hit for hit in diagnostics(server, "admin")["almost_hits"] if hit["namespace"] in team_spaces]
    assert as_admin and all(hit["text_before"].endswith("PIN is 552") for hit in as_admin)  # admin: text


def test_cache_salt_isolates_requests_of_one_tenant_on_all_three_protocols(server):
    def chat_cached(salt):
        return cached(chat(server, "alice", [{"role": "user", "content": "Salted chat. " + long_text(3, 60)}],
                           cache_salt=salt))

    def messages_cached(salt):
        body = {"model": "smollm2", "max_tokens": 2, "cache_salt": salt,
                "messages": [{"role": "user", "content": "Salted messages. " + long_text(4, 60)}]}
        reply = httpx.post(server.base_url + "/v1/messages", json=body, headers=auth("alice"), timeout=300)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["cache_read_input_tokens"]

    def responses_cached(salt):
        body = {"model": "smollm2", "max_output_tokens": 2, "cache_salt": salt, "store": False,
                "input": "Salted responses. " + long_text(5, 60)}
        reply = httpx.post(server.base_url + "/v1/responses", json=body, headers=auth("alice"), timeout=300)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["input_tokens_details"]["cached_tokens"]

    for run in (chat_cached, messages_cached, responses_cached):  # salts of their own: the template's
        run(run.__name__ + "-one")                                # default system prompt is common to all
        again = run(run.__name__ + "-one")
        assert again > 0 and again % BLOCK == 0, run.__name__
        assert run(run.__name__ + "-two") == 0, run.__name__
    bad = httpx.post(server.base_url + "/v1/chat/completions", headers=auth("alice"), timeout=30,
                     json={"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "cache_salt": 7})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "cache_salt"


def ws_first_frame(server, who: str, body: dict) -> dict:
    with connect(server.base_url.replace("http://", "ws://") + "/v1/responses", additional_headers=auth(who)) as ws:
        ws.send(json.dumps({"type": "response.create", **body}))
        return json.loads(ws.recv(timeout=120))


def test_a_stored_response_belongs_to_its_tenant(server):
    url = server.base_url + "/v1/responses"
    created = httpx.post(url, headers=auth("alice"), timeout=300,
                         json={"model": "smollm2", "input": "Remember: my PIN is 4417.", "max_output_tokens": 2})
    assert created.status_code == 200, created.text
    rid = created.json()["id"]
    unknown = httpx.get(f"{url}/resp_0000", headers=auth("bob"), timeout=30)
    for path in (f"/{rid}", f"/{rid}/input_items"):
        theirs = httpx.get(url + path, headers=auth("bob"), timeout=30)
        assert theirs.status_code == 404 and theirs.json()["error"]["code"] == unknown.json()["error"]["code"]
        assert "4417" not in theirs.text
    assert httpx.delete(f"{url}/{rid}", headers=auth("bob"), timeout=30).status_code == 404
    follow = {"model": "smollm2", "input": "What is my PIN?", "max_output_tokens": 2, "previous_response_id": rid}
    continued = httpx.post(url, json=follow, headers=auth("bob"), timeout=300)
    assert continued.status_code == 400 and continued.json()["error"]["code"] == "previous_response_not_found"
    assert ws_first_frame(server, "bob", follow)["error"]["code"] == "previous_response_not_found"
    assert ws_first_frame(server, "alice", follow)["type"] == "response.created"  # the socket's tenant is alice
    assert httpx.get(f"{url}/{rid}", headers=auth("alice"), timeout=30).status_code == 200  # still alice's
    assert httpx.post(url, json=follow, headers=auth("alice"), timeout=300).status_code == 200


def test_exact_cache_counters_on_metrics_are_for_admin_keys_only(server):
    """/metrics counts cached tokens exactly: with several tenants only an admin key may read it."""
    for who in ("alice", "bob", "carol"):
        assert httpx.get(server.base_url + "/metrics", headers=auth(who), timeout=30).status_code == 401
    reply = httpx.get(server.base_url + "/metrics", headers=auth("admin"), timeout=30)
    assert reply.status_code == 200 and "kvgate_prompt_tokens_total" in reply.text


def test_health_shows_the_kv_pool_to_operators_only_and_state_is_owner_only(server):
    health = server.base_url + "/health"
    assert httpx.get(health).json()["status"] == "ok"
    assert "kv_pool" not in httpx.get(health).json()  # block occupancy tells other tenants' prompt sizes
    assert "kv_pool" not in httpx.get(health, headers=auth("alice")).json()
    assert httpx.get(health, headers=auth("admin")).json()["kv_pool"]["blocks_total"] > 0
    chat(server, "alice", pin_messages("1111"))  # a stored conversation on disk
    paths = [path for path in server.state_dir.rglob("*")]
    assert any(path.is_file() for path in paths)
    shared = [str(path) for path in paths if path.stat().st_mode & 0o077]
    assert not shared, f"state readable by group or others: {shared}"

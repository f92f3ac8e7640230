"""The cache page and the Grafana dashboard through one real server with three tenant keys (issue 36).

alice and bob are ordinary tenants; ops holds an admin key (and is the only one who may read
``/metrics``, as there are several tenants). The data endpoint is read over HTTP; the page itself in
a real headless Chromium (skipped, saying why, where Debian's ``chromium`` is not installed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.core.cache.real_helpers import long_text
from tests.harness import ServerProcess
from tests.plugins.chromium import CHROMIUM, HeadlessChromium

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "kvgate.json"
KEYS = {"alice": "key-alice", "bob": "key-bob", "ops": "key-ops"}
SYSTEM = "You are the assistant of a bank. " + long_text(17, 140)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    keys = [{"tenant": "alice", "key": KEYS["alice"]}, {"tenant": "bob", "key": KEYS["bob"]},
            {"tenant": "ops", "key": KEYS["ops"], "admin": True}]
    settings = {"server": {"keys": keys}, "cache": {"almost_hit_min_tokens": 64}}
    with ServerProcess(tmp_path_factory.mktemp("cache-page"), settings) as running:
        yield running


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def chat(server, who: str, text: str, max_tokens: int = 3) -> dict:
    body = {"model": "smollm2", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body, headers=auth(who), timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]


def overview(server, who: str, **params) -> dict:
    reply = httpx.get(server.base_url + "/v1/cache/overview", params=params, headers=auth(who), timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_request_just_made_appears_with_its_token_counts(server):
    chat(server, "alice", "What is my balance?")
    usage = chat(server, "alice", "What is my balance?")  # the same prompt again: its prefix is on the device
    data = overview(server, "alice")
    newest = data["requests"][0]
    assert newest["tenant"] == "alice" and newest["prompt_tokens"] == usage["prompt_tokens"]
    assert newest["cached_device"] == usage["kvgate"]["cached_tokens_device"] > 0  # rounded as alice's usage is
    assert newest["cached_ssd"] == usage["kvgate"]["cached_tokens_ssd"]
    assert newest["computed"] == usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
    assert newest["completion_tokens"] == usage["completion_tokens"] and newest["replayed_tokens"] == 0
    assert newest["ttft_s"] > 0 and newest["tokens_per_s"] > 0
    model = data["model"]
    assert (model["name"], model["runtime"], model["source_format"], model["dialect"]) == \
        ("smollm2", "llama", "gguf", "chatml_json")
    assert model["context"] > 0 and model["dtype"] == "bf16"
    device = next(t for t in data["tiers"] if t["name"] == "device")
    assert device["built"] and 0 < device["bytes"] <= device["capacity_bytes"] and device["entries"] >= 1
    assert device["hits"] is None  # exact tier counters are for operators only, as /metrics is


def test_the_data_endpoint_refuses_without_a_key_in_the_openai_error_shape(server):
    for headers in ({}, {"Authorization": "Bearer key-alicf"}):
        reply = httpx.get(server.base_url + "/v1/cache/overview", headers=headers, timeout=30)
        assert reply.status_code == 401
        assert reply.json()["error"]["type"] == "authentication_error"
        assert reply.json()["error"]["code"] == "invalid_api_key"
    bad = httpx.get(server.base_url + "/v1/cache/overview?limit=zero", headers=auth("alice"), timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limit"
    page = httpx.get(server.base_url + "/ui", timeout=30)  # the page holds no data: it asks for the key
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    root = httpx.get(server.base_url + "/", timeout=30)
    assert root.status_code == 302 and root.headers["location"] == "/ui"
    assert httpx.get(server.base_url + "/ui/missing.js", timeout=30).status_code == 404
    assert httpx.head(server.base_url + "/", timeout=30).status_code == 200  # Claude Code's probe still answers


def test_a_tenant_never_sees_another_tenants_requests(server):
    chat(server, "alice", "Alice asks about loans.")
    chat(server, "bob", "Bob asks about savings.")
    alice, bob, ops = (overview(server, who) for who in ("alice", "bob", "ops"))
    assert alice["requests"] and {r["tenant"] for r in alice["requests"]} == {"alice"}
    assert bob["requests"] and {r["tenant"] for r in bob["requests"]} == {"bob"}
    assert not {r["id"] for r in alice["requests"]} & {r["id"] for r in bob["requests"]}
    assert {"alice", "bob"} <= {r["tenant"] for r in ops["requests"]}  # an admin sees every tenant
    assert ops["operator"] and not alice["operator"]
    assert all(isinstance(t["hits"], int) and isinstance(t["misses"], int) for t in ops["tiers"] if t["built"])
    assert len(overview(server, "ops", limit=1)["requests"]) == 1


def test_almost_hits_show_the_fork_and_the_text_on_either_side(server):
    chat(server, "bob", "My card number ends in 4417.")
    chat(server, "bob", "My card number ends in 7306.")  # forks late inside bob's stored sequence
    hits = overview(server, "bob")["almost_hits"]
    assert hits, "no almost-hit recorded"
    newest = hits[0]
    assert newest["fork_index"] >= 64 and newest["stored_after"] != newest["prompt_after"]
    assert "ends in" in newest["text_before"]
    assert newest["stored_after"].startswith("4") and newest["prompt_after"].startswith("7")
    assert all(hit.get("stored_after") is None or "4417" not in hit["stored_after"]
               for hit in overview(server, "alice")["almost_hits"])  # bob's text never reaches alice


# --- the page in a real browser -------------------------------------------------------------------

ROW_IDS = "[...document.querySelectorAll('#requests tbody tr')].map(r => Number(r.dataset.requestId))"
FIRST_ROW = "[...document.querySelectorAll('#requests tbody tr:first-child td')].map(td => td.textContent)"
COLUMNS = ["time", "tenant", "finish", "prompt", "device", "ssd", "computed", "replayed", "output", "ttft", "rate"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium)")
def test_the_page_in_headless_chromium_shows_and_refreshes_requests(server, tmp_path):
    first = chat(server, "alice", "Show me on the page.")
    with HeadlessChromium(tmp_path / "profile") as browser:
        browser.open(server.base_url + "/", arrives_at="/ui")  # "/" redirects to the page
        browser.wait_for("!document.getElementById('key-form').hidden")  # a key-protected server: it asks
        browser.evaluate(f"document.getElementById('key-input').value = {json.dumps(KEYS['alice'])};"
                         "document.getElementById('key-form').requestSubmit()")
        browser.wait_for("document.body.dataset.loaded === 'true'")
        row = dict(zip(COLUMNS, browser.wait_for(FIRST_ROW, accept=lambda cells: len(cells) == len(COLUMNS))))
        assert row["tenant"] == "alice" and row["prompt"] == f"{first['prompt_tokens']:,}"
        assert row["device"] == f"{first['kvgate']['cached_tokens_device']:,}"
        assert browser.evaluate("document.getElementById('model').textContent").count("chatml_json") == 1
        before = browser.evaluate(ROW_IDS)

        second = chat(server, "alice", "And this one arrives while the page is open, a little longer.")
        after = browser.wait_for(ROW_IDS, timeout=20, accept=lambda ids: ids and ids[0] not in before)
        assert len(after) == len(before) + 1
        row = dict(zip(COLUMNS, browser.evaluate(FIRST_ROW)))
        assert row["prompt"] == f"{second['prompt_tokens']:,}" and row["tenant"] == "alice"
        tenants = browser.evaluate("[...document.querySelectorAll('#requests tbody tr td:nth-child(2)')]"
                                   ".map(td => td.textContent)")
        assert set(tenants) == {"alice"}  # bob's requests made earlier in this module never show
        browser.screenshot(tmp_path / "cache-page.png")
        assert browser.errors == [], browser.errors


# --- the Grafana dashboard ------------------------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
                "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, keywords, labels or variables)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # grouping labels
    text = re.sub(r"\$\w+", "", text)  # dashboard variables
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()
        if not following.startswith("(") and match.group() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def exported_families(exposition: str) -> dict[str, str]:
    """Family name -> type, from the ``# TYPE`` lines of a Prometheus text exposition."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.MULTILINE))


def samples_of(family: str, kind: str) -> set[str]:
    """The sample names a family of this type is exposed as. A counter's family is named with
    ``_total`` in the Prometheus text format (prometheus-client 0.20+) and without in OpenMetrics;
    its samples always carry it."""
    if kind == "counter":
        return {family if family.endswith("_total") else family + "_total"}
    if kind == "histogram":
        return {family + "_bucket", family + "_sum", family + "_count"}
    if kind == "summary":
        return {family, family + "_sum", family + "_count"}
    return {family}


def family_of(name: str, families: dict[str, str]) -> str | None:
    """The exported family a sample name read by a query belongs to, or None."""
    return next((family for family, kind in families.items() if name in samples_of(family, kind)), None)


def dashboard_queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    queries = [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.search(r"label_values\((\w+)", variable["definition"]).group(1)
            queries.append((f"variable {variable['name']}", inner))
    return queries


def test_metric_name_parsing_follows_promql():
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(a_bucket{x="y(z)"}[5m])))') == {"a_bucket"}
    assert metric_names("sum by (tier) (rate(kvgate:hits_total[$__rate_interval])) / on (tier) b") == \
        {"kvgate:hits_total", "b"}
    families = {"a": "histogram", "c_total": "counter", "d": "counter", "g": "gauge"}
    assert family_of("a_bucket", families) == "a" and family_of("a", families) is None
    assert family_of("c_total", families) == "c_total" and family_of("d_total", families) == "d"
    assert family_of("d", families) is None  # a counter's samples always end in _total
    assert family_of("g_total", families) is None and family_of("g", families) == "g"


def test_every_dashboard_query_names_an_exported_metric(server):
    for _ in range(2):  # the second one reads its prefix from the device tier
        chat(server, "alice", "One request before the scrape.")
    assert httpx.get(server.base_url + "/metrics", headers=auth("alice"), timeout=30).status_code == 401
    scrape = httpx.get(server.base_url + "/metrics", headers=auth("ops"), timeout=30)
    assert scrape.status_code == 200
    families = exported_families(scrape.text)
    queries = dashboard_queries()
    assert len(queries) >= 20
    missing = [(title, name) for title, expr in queries for name in metric_names(expr)
               if family_of(name, families) is None]
    assert not missing, missing
    named = {name for _title, expr in queries for name in metric_names(expr)}
    for wanted in ("kvgate_time_to_first_token_seconds_bucket", "kvgate_prompt_tokens_total",
                   "kvgate_cache_tier_bytes", "kvgate_cache_almost_hits_total", "kvgate_requests_waiting",
                   "kvgate_requests_overloaded_total", "kvgate_guard_interventions_total",
                   "smg_tokenizer_cache_lookups_total"):
        assert wanted in named, wanted
    assert re.search(r'^kvgate_cache_tier_bytes\{tier="device"\} [1-9]', scrape.text, flags=re.MULTILINE)
    assert re.search(r'^kvgate_prompt_tokens_total\{source="device"\} [1-9]', scrape.text, flags=re.MULTILINE)

"""Plugins disabled by name in ``[plugins] disabled`` are gone from the real server, and only they:
the cache page (``/``, ``/ui``, ``/v1/cache/overview``), the serving gauges on ``/metrics`` and the
worker-information routes a router probes, while chat and the server's own metrics still answer."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
DISABLED = ["cache_page", "serving_gauges", "worker_info"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("disabled")
    with ServerProcess(folder / "without", {"plugins": {"disabled": DISABLED}}) as without, \
            ServerProcess(folder / "with") as with_all:
        yield without, with_all


@pytest.mark.parametrize("path", ["/", "/ui", "/v1/cache/overview", "/server_info", "/model_info"])
def test_the_disabled_plugins_routes_are_gone(servers, path):
    without, with_all = servers
    assert httpx.get(with_all.base_url + path, timeout=30, follow_redirects=True).status_code == 200
    assert httpx.get(without.base_url + path, timeout=30, follow_redirects=True).status_code in (404, 405)


def test_the_gauges_leave_metrics_and_the_rest_stays(servers):
    without, with_all = servers
    assert "kvgate_kv_pool_blocks_used" in httpx.get(with_all.base_url + "/metrics", timeout=30).text
    metrics = httpx.get(without.base_url + "/metrics", timeout=30).text
    assert "kvgate_kv_pool_blocks_used" not in metrics and "vllm:prompt_tokens" in metrics
    body = {"model": "smollm2", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    reply = httpx.post(without.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0

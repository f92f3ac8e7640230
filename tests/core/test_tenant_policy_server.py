"""The ``register_tenant_policies`` hook through the real server: a third-party policy (no key in
``[server]``, so the built-in ``api_keys`` policy is inactive) decides who may call the routes,
which tenant a request is, and who reads ``/metrics``; two active policies refuse to start."""

from __future__ import annotations

from typing import Optional

import httpx
import pytest

from kvgate.core.config import config_from_dict
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.http.app import create_app
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.tenants import Tenant
from tests.core.cache.app_server import AppServer
from tests.core.cache.real_helpers import long_text

pytestmark = pytest.mark.slow
PREFIX = "team-"


class TeamPolicy:
    """Keys are ``team-<tenant>``; only ``team-ops`` reads operations data."""

    def __init__(self, operators_only: bool = False):
        self.operators_only = operators_only

    def authenticates(self) -> bool:
        return True

    def tenant_for(self, presented_key: str) -> Optional[Tenant]:
        name = presented_key.removeprefix(PREFIX)
        if not presented_key.startswith(PREFIX) or not name or (self.operators_only and name != "ops"):
            return None
        return Tenant(name, admin=name == "ops")

    def operators(self) -> "TeamPolicy":
        return TeamPolicy(operators_only=True)


class TeamPlugin:
    @hookimpl
    def register_tenant_policies(self, register):
        register("team_keys", lambda config: TeamPolicy())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = config_from_dict({"state_dir": str(tmp_path_factory.mktemp("policy")),
                               "cache": {"ssd_enabled": False, "cached_tokens_granularity": 1}})
    with AppServer(config, build_plugin_manager(extra_plugins=[("team_keys", TeamPlugin())])) as running:
        yield running


def get(server, path: str, key: str = "") -> httpx.Response:
    return httpx.get(server.base_url + path, headers={"x-api-key": key} if key else {}, timeout=30)


def cached_tokens(server, key: str, messages: list[dict]) -> int:
    body = {"model": "smollm2", "messages": messages, "max_tokens": 1, "temperature": 0}
    reply = httpx.post(server.base_url + "/v1/chat/completions", json=body,
                       headers={"Authorization": f"Bearer {key}"}, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_the_policy_decides_who_calls_and_who_reads_metrics(server):
    assert get(server, "/health").status_code == 200
    assert get(server, "/v1/models").status_code == 401
    assert get(server, "/v1/models", "alice").status_code == 401
    assert get(server, "/v1/models", "team-alice").status_code == 200
    assert get(server, "/metrics", "team-alice").status_code == 401
    assert get(server, "/metrics", "team-ops").status_code == 200


def test_the_tenant_it_names_scopes_the_cache(server):
    messages = [{"role": "system", "content": long_text(37, 120)}, {"role": "user", "content": "Say hi."}]
    cached_tokens(server, "team-alice", messages)
    assert cached_tokens(server, "team-alice", messages) > 0
    assert cached_tokens(server, "team-bob", messages) == 0


def test_two_active_policies_refuse_to_start_before_the_model_loads(tmp_path):
    config = config_from_dict({"state_dir": str(tmp_path), "server": {"api_key": "key-default"},
                               "model": {"path": str(tmp_path / "no-such-model")}})
    pm = build_plugin_manager(extra_plugins=[("team_keys", TeamPlugin())])
    with pytest.raises(ConfigError, match="several tenant policies are active: 'api_keys', 'team_keys'"):
        create_app(config, pm)

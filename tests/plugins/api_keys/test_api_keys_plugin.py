"""The ``api_keys`` plugin is what checks ``[server]`` keys: registered through the tenant-policy
hook, and with it disabled a server given keys refuses to start (it never serves them unchecked)."""

from __future__ import annotations

import pytest

from kvgate.core.config import config_from_dict
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.plugins.api_keys import Keyring
from tests.harness import ServerProcess


def test_the_keys_policy_is_registered_through_the_hook():
    policies = collect(build_plugin_manager(), "register_tenant_policies", "tenant policy")
    assert "api_keys" in policies.names()
    assert "api_keys" not in collect(build_plugin_manager(disabled=["api_keys"]), "register_tenant_policies",
                                     "tenant policy").names()


def test_the_policy_is_inactive_without_keys_and_a_keyring_with_them():
    build = collect(build_plugin_manager(), "register_tenant_policies", "tenant policy").get("api_keys")
    assert build(config_from_dict({})) is None
    policy = build(config_from_dict({"server": {"keys": [{"tenant": "alice", "key": "key-alice"}]}}))
    assert isinstance(policy, Keyring) and policy.authenticates() and policy.tenant_for("key-alice").name == "alice"


@pytest.mark.slow
@pytest.mark.parametrize("server", [{"api_key": "key-default"}, {"keys": [{"tenant": "alice", "key": "key-a"}]}])
def test_keys_with_the_plugin_disabled_refuse_to_start(tmp_path, server):
    settings = {"server": server, "plugins": {"disabled": ["api_keys"]},
                "model": {"path": str(tmp_path / "no-such-model")}}  # the refusal comes before any load
    with pytest.raises(RuntimeError, match="server exited with 1") as refused:
        ServerProcess(tmp_path, settings, timeout=120).start()
    assert "no tenant policy plugin is active" in str(refused.value)
    assert "refusing to serve without authentication" in str(refused.value)

"""API keys and tenants from the config (``[server] api_key``, ``[[server.keys]]``), and the
namespaces tenants get; no server needed."""

from __future__ import annotations

import pytest

from kvgate.core.config import read_config
from kvgate.core.errors import ConfigError
from kvgate.core.tenants import DEFAULT, Tenant, scoped_namespace
from kvgate.plugins.api_keys import Keyring


def keyring(tmp_path, text: str, environ=None) -> Keyring:
    path = tmp_path / "kvgate.toml"
    path.write_text(text)
    return Keyring.from_config(read_config(path).server, environ or {})


def test_keys_inline_from_a_file_and_from_the_environment(tmp_path):
    (tmp_path / "bob.key").write_text("  key-bob\n")
    ring = keyring(tmp_path, f"""
[server]
api_key = "key-legacy"
[[server.keys]]
tenant = "alice"
key = "key-alice"
[[server.keys]]
tenant = "bob"
key_file = "{tmp_path / 'bob.key'}"
shared_namespace = "team"
[[server.keys]]
tenant = "ops"
key_env = "OPS_KEY"
admin = true
""", {"OPS_KEY": "key-ops"})
    assert ring.tenant_for("key-legacy") == DEFAULT
    assert ring.tenant_for("key-alice") == Tenant("alice")
    assert ring.tenant_for("key-bob") == Tenant("bob", shared_namespace="team")
    assert ring.tenant_for("key-ops") == Tenant("ops", admin=True)
    assert ring.tenant_for("key-alic") is None and ring.tenant_for("") is None


@pytest.mark.parametrize("entry, message", [
    ('tenant = "a"\nkey = "k"\nkey_env = "E"', r"server.keys\[0\]: give exactly one of key, key_file, key_env"),
    ('tenant = "a"', r"server.keys\[0\]: give exactly one .*got none"),
    ('tenant = "a"\nkey_env = "UNSET_KEY"', r"server.keys\[0\].key_env: .*'UNSET_KEY' is not set"),
    ('tenant = "a"\nkey_file = "/nonexistent/key"', r"server.keys\[0\].key_file: cannot read"),
    ('tenant = " "\nkey = "k"', r"server.keys\[0\].tenant: must be a non-empty name"),
    ('tenant = "a"\nkey = "key-legacy"', r"one key is given twice"),
])
def test_a_bad_key_entry_is_an_error_naming_it(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        keyring(tmp_path, f'[server]\napi_key = "key-legacy"\n[[server.keys]]\n{entry}\n')


def test_keys_of_one_tenant_must_agree_on_sharing_and_unknown_fields_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="tenant 'a' name different shared_namespace"):
        keyring(tmp_path, '[[server.keys]]\ntenant = "a"\nkey = "1"\n[[server.keys]]\ntenant = "a"\nkey = "2"\n'
                          'shared_namespace = "t"\n')
    with pytest.raises(ConfigError, match="keys.*secret: unknown key"):
        keyring(tmp_path, '[[server.keys]]\ntenant = "a"\nsecret = "1"\n')


def test_namespaces_of_tenants_salts_and_shared_namespaces():
    base = "ns-model"
    assert scoped_namespace(base, DEFAULT.cache_scope, None) == base  # caches from before tenants still hit
    alice, bob = Tenant("alice"), Tenant("bob")
    spaces = {scoped_namespace(base, t.cache_scope, salt) for t in (DEFAULT, alice, bob) for salt in (None, "s", "t")}
    assert len(spaces) == 9
    carol, dave = Tenant("carol", shared_namespace="team"), Tenant("dave", shared_namespace="team")
    assert scoped_namespace(base, carol.cache_scope, None) == scoped_namespace(base, dave.cache_scope, None)
    assert scoped_namespace(base, Tenant("team").cache_scope, None) != scoped_namespace(base, carol.cache_scope, None)


def test_operators_are_every_key_of_one_tenant_and_admins_of_several():
    from kvgate.core.tenants import Tenant
    from kvgate.plugins.api_keys import Keyring

    single = Keyring([("k1", Tenant("default")), ("k2", Tenant("default"))])
    assert single.operators() is single
    several = Keyring([("a", Tenant("alice")), ("b", Tenant("bob")), ("o", Tenant("ops", admin=True))]).operators()
    assert several.tenant_for("o").name == "ops"
    assert several.tenant_for("a") is None and several.tenant_for("b") is None
    closed = Keyring([("a", Tenant("alice")), ("b", Tenant("bob"))]).operators()
    assert bool(closed) and closed.tenant_for("a") is None  # no admin key: nobody reads /metrics

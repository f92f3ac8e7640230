"""The built-in tenant policy: API keys and the tenants they name, from ``[server] api_key`` and
``[[server.keys]]``; active when at least one key is configured.

::

    [server]
    api_key = "..."                  # optional: one key for the tenant "default"

    [[server.keys]]
    tenant = "alice"
    key_file = "/run/secrets/alice"  # or key = "..." inline, or key_env = "ALICE_KEY"
    [[server.keys]]
    tenant = "ops"
    key_env = "KVGATE_ADMIN_KEY"
    admin = true                     # sees every tenant's diagnostics, text included
    [[server.keys]]
    tenant = "bob"
    key = "..."
    shared_namespace = "team"        # share prefix-cache entries with every key naming "team"

Exactly one of ``key``, ``key_file`` (its content, surrounding whitespace stripped) and ``key_env``
per entry; a key may appear once; several keys may name one tenant if they agree on
``shared_namespace``. A bad entry is a :class:`ConfigError` naming it. Keys are compared in
constant time, and every key is compared, so the time taken does not tell which one nearly matched.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Mapping, Optional

from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.tenants import DEFAULT_TENANT, Tenant


class Keyring:
    """The configured keys, a :class:`kvgate.core.tenant_policy.TenantPolicy`; empty means
    authentication is off (everyone is the default tenant)."""

    def __init__(self, entries: Optional[list[tuple[str, Tenant]]] = None):
        self.entries = [(key.encode("utf-8"), tenant) for key, tenant in entries or []]

    closed = False  # True: no entry means nobody is let in (not: authentication is off)

    def authenticates(self) -> bool:
        """Whether a key is needed: some key is configured, or this is a closed operators ring."""
        return bool(self.entries) or self.closed

    def __bool__(self) -> bool:
        return self.authenticates()

    def tenant_for(self, presented_key: str) -> Optional[Tenant]:
        """The tenant whose key is ``presented_key``, or None."""
        given, found = presented_key.encode("utf-8", "surrogatepass"), None
        for key, tenant in self.entries:
            if hmac.compare_digest(given, key) and found is None:
                found = tenant
        return found

    def operators(self) -> "Keyring":
        """The keys that may read server-wide operations data (``/metrics``): every key while there
        is one tenant, else only admin keys -- exact cache counters would undo the block rounding
        of ``cached_tokens`` between tenants."""
        if len({tenant.name for _key, tenant in self.entries}) <= 1:
            return self
        operators = Keyring()
        operators.entries = [(key, tenant) for key, tenant in self.entries if tenant.admin]
        operators.closed = True
        return operators

    @classmethod
    def from_config(cls, server, environ: Mapping[str, str] = os.environ) -> "Keyring":
        entries: list[tuple[str, Tenant]] = []
        if server.api_key:
            entries.append((server.api_key, Tenant(DEFAULT_TENANT)))
        for index, entry in enumerate(server.keys):
            where = f"server.keys[{index}]"
            if not entry.tenant.strip():
                raise ConfigError(f"{where}.tenant: must be a non-empty name")
            entries.append((read_key(entry, where, environ),
                            Tenant(entry.tenant, entry.admin, entry.shared_namespace)))
        check_unique(entries)
        return cls(entries)


def read_key(entry, where: str, environ: Mapping[str, str]) -> str:
    """The key of one entry, from exactly one of its three sources."""
    given = [name for name in ("key", "key_file", "key_env") if getattr(entry, name)]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of key, key_file, key_env (got {', '.join(given) or 'none'})")
    if entry.key:
        key = entry.key
    elif entry.key_file:
        try:
            key = Path(os.path.expanduser(entry.key_file)).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}.key_file: cannot read {entry.key_file!r} ({exc})") from None
    else:
        key = environ.get(entry.key_env, "").strip()
        if not key:
            raise ConfigError(f"{where}.key_env: the environment variable {entry.key_env!r} is not set or empty")
    if not key:
        raise ConfigError(f"{where}.{given[0]}: the key is empty")
    return key


def check_unique(entries: list[tuple[str, Tenant]]) -> None:
    seen: dict[str, Tenant] = {}
    shared: dict[str, str] = {}
    for key, tenant in entries:
        if key in seen:
            raise ConfigError(f"server.keys: one key is given twice (tenants {seen[key].name!r} and {tenant.name!r})")
        seen[key] = tenant
        if shared.setdefault(tenant.name, tenant.shared_namespace) != tenant.shared_namespace:
            raise ConfigError(f"server.keys: the keys of tenant {tenant.name!r} name different shared_namespace values")


def keyring_policy(config) -> Optional[Keyring]:
    """The keys of ``config``'s ``[server]`` section, or None when none is set (this policy inactive)."""
    keyring = Keyring.from_config(config.server)
    return keyring if keyring else None


@hookimpl
def register_tenant_policies(register):
    register("api_keys", keyring_policy)

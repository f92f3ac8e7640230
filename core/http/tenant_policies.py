"""The active tenant policy: built from the ``register_tenant_policies`` plugins for one config.

At most one policy may be active (a builder returning None is not). With none active, authentication
is off -- unless ``[server] api_key`` or ``[[server.keys]]`` are set: keys nobody checks would leave
the server open to anyone, so that is a :class:`ConfigError`, raised before the model loads.
"""

from __future__ import annotations

from typing import Optional

import pluggy

from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import collect
from kvgate.core.tenant_policy import TenantPolicy
from kvgate.core.tenants import DEFAULT, Tenant


class NoAuthentication:
    """The policy when no plugin's is active: every request is the default tenant."""

    def authenticates(self) -> bool:
        return False

    def tenant_for(self, presented_key: str) -> Optional[Tenant]:
        return DEFAULT

    def operators(self) -> "NoAuthentication":
        return self


def build_tenant_policy(config: Config, pm: pluggy.PluginManager) -> TenantPolicy:
    """The one active policy for ``config``, else :class:`NoAuthentication` when no key is set."""
    builders = collect(pm, "register_tenant_policies", "tenant policy")
    active = {name: policy for name in builders.names() if (policy := builders.get(name)(config)) is not None}
    if len(active) > 1:
        raise ConfigError(f"several tenant policies are active: {', '.join(map(repr, active))}; "
                          "configure one, or disable the others in [plugins] disabled")
    if active:
        return next(iter(active.values()))
    if config.server.api_key or config.server.keys:
        raise ConfigError("server.api_key / server.keys are set, but no tenant policy plugin is active to check "
                          "them (is it in [plugins] disabled?); refusing to serve without authentication")
    return NoAuthentication()

"""The contract of a tenant policy: which tenant a presented API key belongs to.

A policy is contributed through the ``register_tenant_policies`` hook; at most one is active (see
:mod:`kvgate.core.http.tenant_policies`). The auth guard of every protocol router asks it for each
request (:func:`kvgate.core.http.routing.require_api_key`), and operations routes (``/metrics``)
ask its :meth:`TenantPolicy.operators`. The tenant it returns scopes the request's cache namespace,
stored responses and diagnostics (:mod:`kvgate.core.tenants`).
"""

from __future__ import annotations

from typing import Optional, Protocol

from kvgate.core.tenants import Tenant


class TenantPolicy(Protocol):
    """Who a key is. Called on the event loop for every guarded request: keep it fast and
    constant-time in the key (the time taken must not tell which key nearly matched)."""

    def authenticates(self) -> bool:
        """True: every guarded route needs a key this policy accepts; False: authentication is off
        and every request is the default tenant (no key is asked for)."""

    def tenant_for(self, presented_key: str) -> Optional[Tenant]:
        """The tenant whose key is ``presented_key`` (the Bearer or ``x-api-key`` value, ``""`` when
        the request gave none), or None: the request is refused with 401."""

    def operators(self) -> "TenantPolicy":
        """The policy for server-wide operations data (``/metrics``, exact cache counters): the keys
        that may read what every tenant's requests did."""

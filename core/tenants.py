"""Tenants: who a request comes from, decided by its API key, and what that scopes.

A :class:`Tenant` is the result of authentication. The auth guard (:mod:`kvgate.core.http.routing`) puts
it on the connection; an adapter reads it there (:func:`tenant_of`) and copies it onto the
:class:`~kvgate.core.types.ChatRequest` (:func:`scope_request`), and the pipeline derives the cache
namespace from it (:func:`scoped_namespace`). Nothing about tenants is global state.

- cache: each tenant's prefixes live in their own namespace; tenants whose keys name the same
  ``shared_namespace`` share one (an explicit opt-in on both sides); a request's ``cache_salt``
  derives a further namespace inside its tenant's;
- stored responses: readable and continuable by their tenant only;
- diagnostics: see :mod:`kvgate.plugins.cache_routes`.

Which tenant a key belongs to is the active tenant policy's answer (:mod:`kvgate.core.tenant_policy`).
"""

from __future__ import annotations

import collections
import hashlib
import threading
from typing import Any, Optional

import attrs

from kvgate.core.errors import InvalidRequest

DEFAULT_TENANT = "default"
STATE_KEY = "kvgate.tenant"
MAX_SALT_CHARS = 256


@attrs.frozen
class Tenant:
    """A tenant as authentication found it: its name, whether its key is an admin key, and the
    shared namespace its key opts into (``""``: its prefixes are its own)."""

    name: str = DEFAULT_TENANT
    admin: bool = False
    shared_namespace: str = ""

    @property
    def cache_scope(self) -> str:
        """What the cache namespace is derived from: the shared namespace, else the tenant."""
        return f"shared:{self.shared_namespace}" if self.shared_namespace else f"tenant:{self.name}"


DEFAULT = Tenant()


def tenant_of(connection: Any) -> Tenant:
    """The tenant the auth guard found for ``connection`` (the default tenant when auth is off)."""
    state = connection.scope.get("state") or {}
    tenant = state.get(STATE_KEY)
    return tenant if isinstance(tenant, Tenant) else DEFAULT


def cache_salt(body: dict[str, Any]) -> Optional[str]:
    """The request's ``cache_salt`` (vLLM's field: a string that isolates its prefix cache), or None."""
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt or len(salt) > MAX_SALT_CHARS:
        raise InvalidRequest(f"cache_salt must be a non-empty string of at most {MAX_SALT_CHARS} characters.",
                             param="cache_salt")
    return salt


def scope_request(request: Any, tenant: Tenant, body: dict[str, Any]) -> Any:
    """Put the tenant and the body's ``cache_salt`` on a ChatRequest; returns it."""
    request.tenant, request.cache_salt = tenant, cache_salt(body)
    return request


def scoped_namespace(base: str, scope: str, salt: Optional[str]) -> str:
    """The namespace of ``scope`` (and ``salt``) inside the model's namespace ``base``. The default
    tenant without a salt keeps ``base`` itself, so caches written before tenants still hit."""
    if scope == DEFAULT.cache_scope and salt is None:
        return base
    h = hashlib.blake2b(digest_size=20)
    for part in (b"kvgate-tenant-v1", base.encode(), scope.encode(), (salt or "").encode(), bytes([salt is None])):
        h.update(len(part).to_bytes(8, "little") + part)
    return "ns-" + h.hexdigest()


@attrs.frozen
class NamespaceOwner:
    """Who reaches a namespace: its cache scope; ``tenant`` when that scope is one tenant's own."""

    scope: str
    tenant: Optional[str]


class NamespaceOwners:
    """Namespaces the pipeline derived, by owner (the most recent ``keep``; a forgotten one is
    shown to admins only)."""

    def __init__(self, keep: int = 4096):
        self.keep, self.lock = keep, threading.Lock()
        self.owners: collections.OrderedDict[str, NamespaceOwner] = collections.OrderedDict()

    def note(self, namespace: str, tenant: Tenant) -> None:
        owner = NamespaceOwner(tenant.cache_scope, None if tenant.shared_namespace else tenant.name)
        with self.lock:
            self.owners[namespace] = owner
            self.owners.move_to_end(namespace)
            while len(self.owners) > self.keep:
                self.owners.popitem(last=False)

    def owner(self, namespace: str) -> Optional[NamespaceOwner]:
        with self.lock:
            return self.owners.get(namespace)

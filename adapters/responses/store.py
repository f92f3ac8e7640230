"""Stored responses for ``GET /v1/responses/{id}`` and ``previous_response_id``, on disk (diskcache).

One record per response id, a JSON text::

    {"version": 1, "response": <Response object>, "input_items": [<items with ids>],
     "messages": [<canonical Message, unstructured>], "cache_key": str | null, "tenant": str,
     "tools": [<canonical Tool>], "request_tools": [<canonical Tool>]}

``tenant`` (absent: ``"default"``) owns the record: :meth:`ResponseStore.get` answers only the
tenant that stored it, so another tenant's id reads as absent (a 404, or
``previous_response_not_found``).

``messages`` is the conversation after this response (prior turns, this input, this output turn),
without ``instructions``. ``tools`` (absent: none) are those the conversation's
``additional_tools`` items announced, which stay in force along the chain; ``request_tools``
(absent: none) are the request's top-level tools, which a WebSocket follow-up without ``tools``
inherits. A record holds protocol state only, never model state: the prefix cache
finds the KV state again from the tokens. Disk is untrusted: a record that does not parse is
treated as absent (and logged).

Each tenant's records live in a database of their own (the default tenant's in the store's
directory, any other's in ``tenants/<sha256 of its name, 24 hex>/``), each bounded by the size limit
(LRU by size): one tenant's records never evict another's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any, Optional

import attrs
import cattrs
import diskcache

from kvgate.core.cache.disk_state import StateUnusable, open_or_set_aside
from kvgate.core.tenants import DEFAULT_TENANT
from kvgate.core.types import Message, Tool

log = logging.getLogger("kvgate.responses")
VERSION = 1
_converter = cattrs.Converter()


@attrs.define
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    messages: list[Message]
    cache_key: Optional[str] = None
    tenant: str = DEFAULT_TENANT
    tools: list[Tool] = attrs.Factory(list)
    request_tools: list[Tool] = attrs.Factory(list)

    def to_json(self) -> str:
        tools = {key: _converter.unstructure(value)
                 for key, value in (("tools", self.tools), ("request_tools", self.request_tools)) if value}
        return json.dumps({"version": VERSION, "response": self.response, "input_items": self.input_items,
                           "messages": _converter.unstructure(self.messages), "cache_key": self.cache_key,
                           **({"tenant": self.tenant} if self.tenant != DEFAULT_TENANT else {}), **tools},
                          ensure_ascii=False)

    @classmethod
    def from_json(cls, text: Any) -> "StoredResponse":
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("unknown record version")
        if not isinstance(data.get("response"), dict) or not isinstance(data.get("input_items"), list):
            raise ValueError("response or input_items missing")
        key = data.get("cache_key")
        if key is not None and not isinstance(key, str):
            raise ValueError("cache_key is not a string")
        tenant = data.get("tenant", DEFAULT_TENANT)
        if not isinstance(tenant, str):
            raise ValueError("tenant is not a string")
        return cls(response=data["response"], input_items=data["input_items"],
                   messages=_converter.structure(data.get("messages"), list[Message]), cache_key=key, tenant=tenant,
                   tools=_converter.structure(data.get("tools") or [], list[Tool]),
                   request_tools=_converter.structure(data.get("request_tools") or [], list[Tool]))


class ResponseStore:
    """The records on disk. A damaged store is moved aside and replaced by an empty one, an
    unwritable one disables storing (with a warning: ``store: true`` responses are then not kept);
    a record that cannot be read later reads as absent. Either way the server keeps serving."""

    def __init__(self, directory: Path, size_limit: int = 512 * 1024 * 1024):
        self.directory, self.size_limit = directory, size_limit
        self._caches: dict[str, Optional[diskcache.Cache]] = {}
        self._lock = threading.Lock()
        self._cache_of(DEFAULT_TENANT)

    @property
    def enabled(self) -> bool:
        return self._cache_of(DEFAULT_TENANT) is not None

    def tenant_directory(self, tenant: str) -> Path:
        if tenant == DEFAULT_TENANT:
            return self.directory
        return self.directory / "tenants" / hashlib.sha256(tenant.encode()).hexdigest()[:24]

    def _cache_of(self, tenant: str) -> Optional[diskcache.Cache]:
        """The tenant's database, opened on first use (None: unusable, storing is off for it)."""
        with self._lock:
            if tenant not in self._caches:
                directory = self.tenant_directory(tenant)
                try:
                    self._caches[tenant] = open_or_set_aside(
                        directory, lambda: open_cache(directory, self.size_limit), "responses store")
                except StateUnusable as exc:
                    log.warning("%s; stored responses are disabled", exc)
                    self._caches[tenant] = None
            return self._caches[tenant]

    def put(self, record: StoredResponse) -> None:
        cache = self._cache_of(record.tenant)
        if cache is None:
            return
        try:
            cache.set(record.response["id"], record.to_json())
        except Exception as exc:  # a full or failing disk loses the record, not the response
            log.warning("responses store: could not keep %s (%s: %s)", record.response["id"], type(exc).__name__, exc)

    def get(self, response_id: str, tenant: str = DEFAULT_TENANT) -> Optional[StoredResponse]:
        """The record of ``response_id`` when ``tenant`` owns it, else None."""
        cache = self._cache_of(tenant)
        if cache is None:
            return None
        try:
            text = cache.get(response_id)
            if text is None:
                return None
            record = StoredResponse.from_json(text)
        except Exception as exc:  # untrusted disk: any malformed record reads as absent
            log.warning("responses store: dropping unreadable record %s (%s: %s)", response_id, type(exc).__name__, exc)
            self.delete(response_id, tenant)
            return None
        return record if record.tenant == tenant else None

    def delete(self, response_id: str, tenant: str = DEFAULT_TENANT) -> bool:
        cache = self._cache_of(tenant)
        if cache is None:
            return False
        try:
            return bool(cache.delete(response_id))
        except Exception as exc:
            log.warning("responses store: could not delete %s (%s: %s)", response_id, type(exc).__name__, exc)
            return False

    def close(self) -> None:
        with self._lock:
            for cache in self._caches.values():
                if cache is not None:
                    cache.close()
            self._caches.clear()


def open_cache(directory: Path, size_limit: int) -> diskcache.Cache:
    """The diskcache database, checked by reading every key (damage raises here, at start)."""
    cache = diskcache.Cache(str(directory), size_limit=size_limit, eviction_policy="least-recently-used")
    try:
        for _ in cache.iterkeys():
            pass
    except BaseException:
        cache.close()
        raise
    return cache

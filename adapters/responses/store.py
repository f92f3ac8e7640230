"""Stored responses for ``GET /v1/responses/{id}`` and ``previous_response_id``, on disk (diskcache).

One record per response id, a JSON text::

    {"version": 1, "response": <Response object>, "input_items": [<items with ids>],
     "messages": [<canonical Message, unstructured>], "cache_key": str | null, "tenant": str,
     "tools": [<canonical Tool>], "request_tools": [<canonical Tool>]}

or, for a record that continues a stored response, ``"version": 2`` with ``"parent"``,
``"shared"`` and ``"added"`` instead of ``"messages"``: records share their history instead of
copying it (:mod:`.store_rows`; deleting and eviction along a chain: :mod:`.store_chain`).

``tenant`` (absent: ``"default"``) owns the record: :meth:`ResponseStore.get` answers only the
tenant that stored it, so another tenant's id reads as absent (a 404, or
``previous_response_not_found``).

``messages`` is the conversation after this response (prior turns, this input, this output
turn), without ``instructions``, rebuilt along the chain (stopping at a conversation still in
memory, :mod:`.store_recent`). ``tools`` (absent: none) are those the conversation's
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
from kvgate.adapters.responses import store_chain
from kvgate.adapters.responses.store_recent import RecentConversations
from kvgate.adapters.responses.store_rows import BrokenChain, parse_row, row_text, unstructure

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
    parent: Optional[str] = None  # the previous response whose first ``shared`` messages ``messages`` repeats
    shared: int = 0

    def to_row(self, chained: bool) -> dict[str, Any]:
        """The row to store: with ``chained`` (the parent is stored) only the messages this adds."""
        tools = {key: _converter.unstructure(value)
                 for key, value in (("tools", self.tools), ("request_tools", self.request_tools)) if value}
        history = {"version": 2, "parent": self.parent, "shared": self.shared,
                   "added": unstructure(self.messages[self.shared:])} if chained and self.parent else \
            {"version": VERSION, "messages": unstructure(self.messages)}
        return {**history, "response": self.response, "input_items": self.input_items, "cache_key": self.cache_key,
                **({"tenant": self.tenant} if self.tenant != DEFAULT_TENANT else {}), **tools}

    def to_json(self) -> str:
        """The whole record (a version-1 row, readable without its chain)."""
        return row_text(self.to_row(chained=False))

    @classmethod
    def from_json(cls, text: Any) -> "StoredResponse":
        row = parse_row(text)
        if "parent" in row:
            raise ValueError("a chained record needs its chain: read it from the store")
        return cls.from_row(row, row["own_messages"])

    @classmethod
    def from_row(cls, row: dict[str, Any], messages: list[Message]) -> "StoredResponse":
        return cls(response=row["response"], input_items=row["input_items"], messages=messages,
                   cache_key=row.get("cache_key"), tenant=row.get("tenant", DEFAULT_TENANT),
                   tools=_converter.structure(row.get("tools") or [], list[Tool]),
                   request_tools=_converter.structure(row.get("request_tools") or [], list[Tool]),
                   parent=row.get("parent"), shared=row.get("shared", 0))


class ResponseStore:
    """The records on disk. A damaged store is moved aside and replaced by an empty one, an
    unwritable one disables storing (with a warning: ``store: true`` responses are then not kept);
    a record that cannot be read later reads as absent. Either way the server keeps serving."""

    def __init__(self, directory: Path, size_limit: int = 512 * 1024 * 1024):
        self.directory, self.size_limit = directory, size_limit
        self._caches: dict[str, Optional[diskcache.Cache]] = {}
        self._lock = threading.Lock()
        self.recent = RecentConversations()  # rebuilding a chain stops at the first one found here
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
            store_chain.put(cache, record)
            self.recent.remember(record.tenant, record.response["id"], record.messages)
        except Exception as exc:  # a full or failing disk loses the record, not the response
            log.warning("responses store: could not keep %s (%s: %s)", record.response["id"], type(exc).__name__, exc)

    def get(self, response_id: str, tenant: str = DEFAULT_TENANT) -> Optional[StoredResponse]:
        """The record of ``response_id`` when ``tenant`` owns it, else None (also when an earlier
        response its conversation needs was evicted)."""
        cache = self._cache_of(tenant)
        if cache is None:
            return None
        try:
            row = store_chain.read_row(cache, response_id)
            if row is None or row.get("deleted") or row.get("tenant", DEFAULT_TENANT) != tenant:
                return None
        except Exception as exc:  # untrusted disk: any malformed record reads as absent
            log.warning("responses store: dropping unreadable record %s (%s: %s)", response_id, type(exc).__name__, exc)
            self._drop(cache, response_id)
            return None
        try:
            messages = self.recent.get(tenant, response_id) or store_chain.load(
                cache, row, lambda parent_id: self.recent.get(tenant, parent_id))
        except BrokenChain as exc:
            log.warning("responses store: %s reads as absent: %s", response_id, exc)
            return None
        self.recent.remember(tenant, response_id, messages)
        return StoredResponse.from_row(row, list(messages))

    def delete(self, response_id: str, tenant: str = DEFAULT_TENANT) -> bool:
        cache = self._cache_of(tenant)
        if cache is None:
            return False
        self.recent.forget(tenant, response_id)
        try:
            return store_chain.delete(cache, response_id, tenant)
        except Exception as exc:
            log.warning("responses store: could not delete %s (%s: %s)", response_id, type(exc).__name__, exc)
            self._drop(cache, response_id)
            return False

    @staticmethod
    def _drop(cache: diskcache.Cache, response_id: str) -> None:
        try:
            cache.delete(response_id)
        except Exception as exc:
            log.warning("responses store: could not drop %s (%s: %s)", response_id, type(exc).__name__, exc)

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

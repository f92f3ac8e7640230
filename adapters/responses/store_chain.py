"""Reading, writing and deleting the rows of one tenant's database, keeping chains whole.

A record is written chained (only what it adds, :mod:`.store_rows`) when its parent's row is
there; the parent's ``children`` count goes up in the same transaction. Deleting a response
that children still continue from keeps its row as a tombstone: the response reads as absent at
once (GET, ``input_items``, ``previous_response_id`` and DELETE answer 404), while its children's
chains stay whole; the tombstone goes when its last child is deleted. Eviction by size (LRU)
may still take a row a child needs: reading the child then raises :class:`BrokenChain`, and the
store answers as for an unknown id. Reading a record reads its ancestors too, which keeps them
recently used.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import diskcache

from kvgate.core.tenants import DEFAULT_TENANT
from kvgate.adapters.responses.store_rows import BrokenChain, conversation, parse_row, row_text, tombstone


def read_row(cache: diskcache.Cache, response_id: str) -> Optional[dict[str, Any]]:
    """The parsed row of ``response_id`` (None: absent); raises when the row is malformed."""
    text = cache.get(response_id)
    return None if text is None else parse_row(text)


def ancestor_row(cache: diskcache.Cache, response_id: str) -> Optional[dict[str, Any]]:
    try:
        return read_row(cache, response_id)
    except Exception as exc:  # an unreadable ancestor breaks the chain; its own reader drops it
        raise BrokenChain(f"earlier response {response_id} is unreadable ({type(exc).__name__})") from None


def load(cache: diskcache.Cache, row: dict[str, Any], known: Callable[[str], Optional[list]]) -> list:
    """The whole conversation of ``row``, from the rows of its chain up to an ancestor whose
    conversation is ``known`` (raises :class:`BrokenChain`)."""
    with cache.transact():  # one commit for the ancestors' access times, not one per ancestor
        return conversation(row, lambda parent_id: ancestor_row(cache, parent_id), known)


def put(cache: diskcache.Cache, record: Any) -> None:
    """Write ``record`` (a ``StoredResponse``), chained when its parent's row is there."""
    with cache.transact():
        chained = record.parent is not None and _adopt(cache, record.parent, record.tenant)
        cache.set(record.response["id"], row_text(record.to_row(chained=chained)))


def _adopt(cache: diskcache.Cache, parent_id: str, tenant: str) -> bool:
    """Count one more child of ``parent_id``; False when its row is absent, unreadable or another
    tenant's (the child is then written whole)."""
    try:
        parent = read_row(cache, parent_id)
    except Exception:
        return False
    if parent is None or parent.get("tenant", DEFAULT_TENANT) != tenant:
        return False
    parent["children"] = parent.get("children", 0) + 1
    cache.set(parent_id, row_text(parent))
    return True


def delete(cache: diskcache.Cache, response_id: str, tenant: str) -> bool:
    """Delete ``tenant``'s response; False when there was none (or it was deleted already)."""
    with cache.transact():
        row = read_row(cache, response_id)
        if row is None or row.get("deleted") or row.get("tenant", DEFAULT_TENANT) != tenant:
            return False
        if row.get("children", 0) > 0:
            cache.set(response_id, row_text(tombstone(row)))
        else:
            cache.delete(response_id)
            _release(cache, row.get("parent"))
        return True


def _release(cache: diskcache.Cache, parent_id: Optional[str]) -> None:
    """One child fewer for ``parent_id``: a tombstone left without children goes, and so on up."""
    while parent_id is not None:
        try:
            parent = read_row(cache, parent_id)
        except Exception:
            return
        if parent is None:
            return
        parent["children"] = max(0, parent.get("children", 0) - 1)
        if parent["children"] or not parent.get("deleted"):
            cache.set(parent_id, row_text(parent))
            return
        cache.delete(parent_id)
        parent_id = parent.get("parent")

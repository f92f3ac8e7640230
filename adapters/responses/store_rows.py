"""The rows of the responses store, and the conversation rebuilt along a chain of them.

A row is a record's JSON text. A record that continues a stored ``previous_response_id`` stores
only what it adds: ``"parent"`` (that response's id), ``"shared"`` (how many of the parent's
conversation messages its own conversation starts with) and ``"added"`` (the messages after
those), so a chain of n turns takes O(n) bytes, not O(n²). Any other record keeps its whole
conversation in ``"messages"``, as every version-1 row (written before chains) does. Two more
fields serve deletion: ``"children"``, how many rows name this one as parent, and ``"deleted"``,
set on a row its owner deleted while children still continue from it (it keeps only what the
chain needs and reads as absent).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

import cattrs

from kvgate.core.tenants import DEFAULT_TENANT
from kvgate.core.types import Message

VERSIONS = (1, 2)  # 1: every row whole (no parent), before chains
CHAIN_FIELDS = ("version", "tenant", "messages", "parent", "shared", "added", "children")
_converter = cattrs.Converter(omit_if_default=True)  # a turn's row is mostly its messages' own text


class BrokenChain(Exception):
    """An earlier row of the chain is missing (deleted before chains, evicted) or unreadable."""


def shared_prefix(prior: list[Message], conversation: list[Message]) -> int:
    """How many leading messages of ``conversation`` are those of ``prior``, in order."""
    count = 0
    for before, now in zip(prior, conversation):
        if before != now:
            break
        count += 1
    return count


def parse_row(text: Any) -> dict[str, Any]:
    """The row's fields, checked (raises ValueError, TypeError or a cattrs error when malformed)."""
    row = json.loads(text)
    if not isinstance(row, dict) or row.get("version") not in VERSIONS:
        raise ValueError("unknown record version")
    if not row.get("deleted") and (not isinstance(row.get("response"), dict)
                                   or not isinstance(row.get("input_items"), list)):
        raise ValueError("response or input_items missing")
    if row.get("cache_key") is not None and not isinstance(row["cache_key"], str):
        raise ValueError("cache_key is not a string")
    if not isinstance(row.get("tenant", DEFAULT_TENANT), str):
        raise ValueError("tenant is not a string")
    if not isinstance(row.get("children", 0), int) or row.get("children", 0) < 0:
        raise ValueError("children is not a count")
    if "parent" in row and (not isinstance(row["parent"], str) or not isinstance(row.get("shared"), int)
                            or row["shared"] < 0 or not isinstance(row.get("added"), list)):
        raise ValueError("parent, shared or added malformed")
    row["own_messages"] = _converter.structure(row["added"] if "parent" in row else row.get("messages"),
                                               list[Message])
    return row


def conversation(row: dict[str, Any], read: Callable[[str], Optional[dict[str, Any]]],
                 known: Callable[[str], Optional[list[Message]]] = lambda _: None) -> list[Message]:
    """The whole conversation of parsed ``row``: its ancestors' messages it shares, then its own.
    ``read(id)`` gives an ancestor's parsed row (None: absent), ``known(id)`` an ancestor's whole
    conversation when at hand (the walk stops there); raises :class:`BrokenChain`."""
    steps: list[dict[str, Any]] = []
    seen: set[str] = set()
    base = None
    while "parent" in row and base is None:
        steps.append(row)
        parent_id = row["parent"]
        if parent_id in seen:
            raise BrokenChain(f"the chain loops at {parent_id}")
        seen.add(parent_id)
        base = known(parent_id)
        if base is None:
            row = _ancestor(read, parent_id, row.get("tenant", DEFAULT_TENANT))
    messages = list(base if base is not None else row["own_messages"])
    for step in reversed(steps):
        if step["shared"] > len(messages):
            raise BrokenChain(f"{step['parent']} holds fewer messages than its child shares")
        del messages[step["shared"]:]
        messages.extend(step["own_messages"])
    return messages


def _ancestor(read: Callable[[str], Optional[dict[str, Any]]], parent_id: str, tenant: str) -> dict[str, Any]:
    parent = read(parent_id)
    if parent is None or parent.get("tenant", DEFAULT_TENANT) != tenant:
        raise BrokenChain(f"earlier response {parent_id} is gone")
    return parent


def tombstone(row: dict[str, Any]) -> dict[str, Any]:
    """What a deleted row keeps while children continue from it: only what their chains need."""
    return {**{key: row[key] for key in CHAIN_FIELDS if key in row}, "version": 2, "deleted": True}


def row_text(row: dict[str, Any]) -> str:
    return json.dumps({key: value for key, value in row.items() if key != "own_messages"}, ensure_ascii=False)


def unstructure(messages: list[Message]) -> list[Any]:
    return _converter.unstructure(messages)

"""Stored responses for ``GET /v1/responses/{id}`` and ``previous_response_id``, on disk (diskcache).

One record per response id, a JSON text::

    {"version": 1, "response": <Response object>, "input_items": [<items with ids>],
     "messages": [<canonical Message, unstructured>], "cache_key": str | null}

``messages`` is the conversation after this response (prior turns, this input, this output turn),
without ``instructions``. A record holds protocol state only, never model state: the prefix cache
finds the KV state again from the tokens. Disk is untrusted: a record that does not parse is
treated as absent (and logged). The store is bounded (LRU by size).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import attrs
import cattrs
import diskcache

from kvgate.core.types import Message

log = logging.getLogger("kvgate.responses")
VERSION = 1
_converter = cattrs.Converter()


@attrs.define
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    messages: list[Message]
    cache_key: Optional[str] = None

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, "response": self.response, "input_items": self.input_items,
                           "messages": _converter.unstructure(self.messages), "cache_key": self.cache_key},
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
        return cls(response=data["response"], input_items=data["input_items"],
                   messages=_converter.structure(data.get("messages"), list[Message]), cache_key=key)


class ResponseStore:
    def __init__(self, directory: Path, size_limit: int = 512 * 1024 * 1024):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._cache = diskcache.Cache(str(directory), size_limit=size_limit,
                                      eviction_policy="least-recently-used")

    def put(self, record: StoredResponse) -> None:
        self._cache.set(record.response["id"], record.to_json())

    def get(self, response_id: str) -> Optional[StoredResponse]:
        text = self._cache.get(response_id)
        if text is None:
            return None
        try:
            return StoredResponse.from_json(text)
        except Exception as exc:  # untrusted disk: any malformed record reads as absent
            log.warning("responses store: dropping unreadable record %s (%s)", response_id, exc)
            self._cache.delete(response_id)
            return None

    def delete(self, response_id: str) -> bool:
        return bool(self._cache.delete(response_id))

    def close(self) -> None:
        self._cache.close()

"""The conversations of the most recently stored or read responses, in memory, bounded in bytes.

Rebuilding a conversation walks its chain back to where it starts, one row per turn (about 0.15 ms
each). An agent loop continues the response it just stored, so the walk stops at the first
ancestor found here and costs a row or two. A conversation never changes once stored, so an
entry is never stale; a response deleted outright is forgotten here too. Keys carry the tenant.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Optional

from kvgate.core.types import Message

MAX_BYTES = 16 * 1024 * 1024  # estimated: the messages' text plus a fixed cost per message
MAX_ENTRIES = 64
MESSAGE_OVERHEAD = 200


def weight(messages: list[Message]) -> int:
    return sum(len(m.content) + len(m.reasoning or "") + MESSAGE_OVERHEAD
               + sum(len(call.arguments) + MESSAGE_OVERHEAD for call in m.tool_calls) for m in messages)


class RecentConversations:
    def __init__(self, max_bytes: int = MAX_BYTES, max_entries: int = MAX_ENTRIES):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.entries: OrderedDict[tuple[str, str], tuple[list[Message], int]] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def get(self, tenant: str, response_id: str) -> Optional[list[Message]]:
        with self.lock:
            entry = self.entries.get((tenant, response_id))
            if entry is None:
                return None
            self.entries.move_to_end((tenant, response_id))
            return entry[0]

    def remember(self, tenant: str, response_id: str, messages: list[Message]) -> None:
        size = weight(messages)
        with self.lock:
            self._forget(tenant, response_id)
            if size > self.max_bytes:
                return
            self.entries[(tenant, response_id)] = (messages, size)
            self.bytes += size
            while self.bytes > self.max_bytes or len(self.entries) > self.max_entries:
                _, (_, dropped) = self.entries.popitem(last=False)
                self.bytes -= dropped

    def forget(self, tenant: str, response_id: str) -> None:
        with self.lock:
            self._forget(tenant, response_id)

    def _forget(self, tenant: str, response_id: str) -> None:
        entry = self.entries.pop((tenant, response_id), None)
        if entry is not None:
            self.bytes -= entry[1]

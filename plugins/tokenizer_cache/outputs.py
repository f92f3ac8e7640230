"""Recent outputs' sampled ids, so that a resent assistant turn is tokenized as the model saw it.

The ids a model samples are not always the canonical tokenization of their text (``' Wind'+'ing'``
where the tokenizer says ``' W'+'inding'``; a fenced ``' {'+'"'`` where it says ``' {"'``). A
client that resends the reply would get it re-tokenized canonically, and the next prompt would fork
from the prefix cache inside the previous output.

So each finished output is registered as the *segment* the next prompt will hold between two
boundary tokens: the previous prompt's tail after its last boundary token (the role header, e.g.
``assistant\\n``) followed by the output up to its stop token. The key is that segment's decoded
text; the value is exactly the ids the model saw for it (the prompt's own header ids, then the
sampled ids). A resent segment with the same text therefore tokenizes to the previous prompt +
output, which is what the prefix cache holds; an edited text misses and is tokenized canonically.

Entries belong to one namespace, which includes the tenant and cache salt: one tenant's outputs
never change another's tokens. The registry is bounded by entries, by entries per namespace (so
one busy tenant cannot push out everyone else's) and by bytes (text + 4 per id), least recently
used out first. With the SSD tier on, the registry is kept on disk beside it instead
(:mod:`.outputs_store`), so a restart or another worker resolves a resent reply the same way.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from typing import Iterable, Optional

DEFAULT_MAX_ENTRIES = 512
DEFAULT_MAX_PER_NAMESPACE = 128
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


class OutputIdsRegistry:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_per_namespace: int = DEFAULT_MAX_PER_NAMESPACE):
        self.max_entries = max_entries
        self.max_per_namespace = max_per_namespace
        self.max_bytes = max_bytes
        self._entries: "OrderedDict[tuple[str, str], array]" = OrderedDict()
        self._per_namespace: dict[str, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def holds(self, namespace: str) -> bool:
        """Whether ``namespace`` has any entry (a prompt of a namespace without one skips the scan)."""
        return namespace in self._per_namespace

    def add(self, namespace: str, segment: str, ids: list[int]) -> None:
        key, value = (namespace, segment), array("I", ids)
        cost = _cost(segment, value)
        if cost > self.max_bytes or self.max_entries <= 0:
            return
        with self._lock:
            self._drop(key)
            self._entries[key] = value
            self._per_namespace[namespace] = self._per_namespace.get(namespace, 0) + 1
            self._bytes += cost
            if self._per_namespace[namespace] > self.max_per_namespace:
                self._drop(next(k for k in self._entries if k[0] == namespace))
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def get(self, namespace: str, segment: str) -> Optional[list[int]]:
        key = (namespace, segment)
        with self._lock:
            ids = self._entries.get(key)
            if ids is None:
                return None
            self._entries.move_to_end(key)
            return ids.tolist()

    def discard(self, namespace: str, segment: str) -> None:
        with self._lock:
            self._drop((namespace, segment))

    def flush(self, timeout: float) -> bool:
        """Nothing waits to be written in memory: True at once (the store's call, :mod:`.outputs_store`)."""
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._per_namespace.clear()
            self._bytes = 0

    def _drop(self, key: tuple[str, str]) -> None:  # called with the lock held
        ids = self._entries.pop(key, None)
        if ids is None:
            return
        self._bytes -= _cost(key[1], ids)
        namespace = key[0]
        left = self._per_namespace[namespace] - 1
        if left:
            self._per_namespace[namespace] = left
        else:
            del self._per_namespace[namespace]


def _cost(segment: str, ids: array) -> int:
    return len(segment.encode("utf-8", "surrogatepass")) + 4 * len(ids)


def boundary_pattern(boundary_tokens: Iterable[str]) -> Optional["re.Pattern[str]"]:
    """A pattern matching any boundary token, the longest first at one position (as L1 splits)."""
    ordered = sorted(boundary_tokens, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def segment_spans(pattern: "re.Pattern[str]", text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-empty run of ``text`` after a boundary token, up to the next one."""
    matches = list(pattern.finditer(text))
    ends = [match.start() for match in matches[1:]] + [len(text)]
    return [(match.end(), end) for match, end in zip(matches, ends) if end > match.end()]

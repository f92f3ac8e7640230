"""Almost-hits: lookups that forked late inside a stored sequence.

When the prompt shares at least ``min_tokens`` tokens and more than ``min_ratio`` of a stored
sequence but then diverges inside it, the miss is almost always a template, a re-rendered tool
call or a volatile header. Each one is logged, counted, and kept (the most recent ``keep``) with
the fork position and the decoded text on both sides.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Sequence

log = logging.getLogger("kvgate.cache")


class AlmostHits:
    def __init__(self, tokenizer: Any, min_tokens: int, min_ratio: float, counter: Any,
                 keep: int = 32, context_tokens: int = 24):
        self.tokenizer, self.min_tokens, self.min_ratio, self.counter = tokenizer, min_tokens, min_ratio, counter
        self.context_tokens = context_tokens
        self.items: collections.deque[dict] = collections.deque(maxlen=keep)
        self.lock = threading.Lock()

    def qualifies(self, prompt: Sequence[int], stored: Sequence[int], fork: int) -> bool:
        inside = fork < len(stored) and fork < len(prompt)
        return inside and fork >= self.min_tokens and fork > self.min_ratio * len(stored)

    def record(self, namespace: str, tier: str, prompt: Sequence[int], stored: Sequence[int], fork: int) -> dict:
        ctx = self.context_tokens
        item = {
            "time": time.time(), "namespace": namespace, "tier": tier, "fork_index": fork,
            "stored_tokens": len(stored), "prompt_tokens": len(prompt), "shared_ratio": round(fork / len(stored), 4),
            "text_before": self._decode(prompt[max(0, fork - ctx):fork]),
            "stored_after": self._decode(stored[fork:fork + ctx]),
            "prompt_after": self._decode(prompt[fork:fork + ctx]),
        }
        with self.lock:
            self.items.append(item)
        self.counter.inc()
        log.info("prefix cache almost-hit (%s): forked at token %d of a stored sequence of %d; stored %r, prompt %r",
                 tier, fork, len(stored), item["stored_after"], item["prompt_after"])
        return item

    def _decode(self, ids: Sequence[int]) -> str:
        try:
            return self.tokenizer.decode(list(ids), skip_special_tokens=False)
        except Exception:  # a diagnostic must never fail a request
            return repr(list(ids))

    def recent(self) -> list[dict]:
        with self.lock:
            return list(self.items)

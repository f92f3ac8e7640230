"""The most recent finished requests, kept in memory (``Pipeline.recent_requests``).

One :class:`RequestSummary` per finished generation or warm-up: whose it was (tenant), where its
prompt's state came from (device, SSD, computed), its time to first token and decode rate. The
counts are exact; a reader that shows them to a tenant who may not see exact cache counters rounds
them first (see ``Pipeline.reported`` and :meth:`kvgate.core.tenant_policy.TenantPolicy.operators`). Read by
the cache page (:mod:`kvgate.plugins.cache_page`).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Optional

import attrs

KEEP = 200


@attrs.frozen
class RequestSummary:
    """One finished request. ``replayed_tokens``: prompt tokens recomputed from an earlier state
    snapshot (runtimes with recurrent state); the engine reports none yet, so it is 0."""

    id: int
    time: float
    tenant: str
    namespace: str
    reason: str
    prompt_tokens: int
    cached_device: int
    cached_ssd: int
    completion_tokens: int
    ttft_s: Optional[float]
    decode_tokens_per_s: Optional[float]
    replayed_tokens: int = 0

    @property
    def computed_tokens(self) -> int:
        return max(self.prompt_tokens - self.cached_device - self.cached_ssd, 0)


def decode_rate(tokens: int, first_token_at: Optional[float], last_token_at: Optional[float]) -> Optional[float]:
    """Tokens per second after the first token (None with fewer than two tokens)."""
    if tokens < 2 or first_token_at is None or last_token_at is None or last_token_at <= first_token_at:
        return None
    return (tokens - 1) / (last_token_at - first_token_at)


class RecentRequests:
    """The last ``keep`` summaries, oldest first; safe to use from any thread."""

    def __init__(self, keep: int = KEEP):
        self.items: collections.deque[RequestSummary] = collections.deque(maxlen=keep)
        self.ids = itertools.count(1)
        self.lock = threading.Lock()

    def add(self, tenant: str, namespace: str, reason: str, prompt_tokens: int, cached_device: int, cached_ssd: int,
            completion_tokens: int = 0, ttft_s: Optional[float] = None,
            decode_tokens_per_s: Optional[float] = None) -> RequestSummary:
        with self.lock:
            summary = RequestSummary(next(self.ids), time.time(), tenant, namespace, reason, prompt_tokens,
                                     cached_device, cached_ssd, completion_tokens, ttft_s, decode_tokens_per_s)
            self.items.append(summary)
        return summary

    def recent(self) -> list[RequestSummary]:
        with self.lock:
            return list(self.items)

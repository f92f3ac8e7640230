"""The most recent finished requests, kept in memory by the cache page (a request observer).

One :class:`RequestSummary` per finished generation or warm-up: whose it was (tenant), where its
prompt's state came from (device, SSD, computed), its time to first token and decode rate. The
counts are exact; a reader that shows them to a tenant who may not see exact cache counters rounds
them first (see ``Pipeline.reported`` and :meth:`kvgate.core.tenant_policy.TenantPolicy.operators`).
Each server's list is found from its pipeline (:func:`recent_requests_of`).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
import weakref
from typing import Optional

import attrs

from kvgate.core.request_trace import RequestTrace

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

    def request_finished(self, trace: RequestTrace) -> None:
        self.add(trace.tenant, trace.namespace, trace.finish_reason, trace.prompt_tokens, trace.cached_device,
                 trace.cached_ssd, trace.completion_tokens, trace.ttft_s, trace.decode_tokens_per_s)

    def recent(self) -> list[RequestSummary]:
        with self.lock:
            return list(self.items)


# one list per served pipeline: the observer and the page's routes are built apart, from one ctx
LISTS: "weakref.WeakKeyDictionary[object, RecentRequests]" = weakref.WeakKeyDictionary()
LISTS_LOCK = threading.Lock()


def recent_requests_of(ctx) -> RecentRequests:
    """The recent requests of ``ctx``'s server (an empty list until its observer sees one)."""
    with LISTS_LOCK:
        return LISTS.setdefault(ctx.pipeline, RecentRequests())

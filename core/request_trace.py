"""What a request observer sees: one request's stages with their wall-clock times.

A :class:`RequestTrace` exists only when at least one observer is registered
(``register_request_observers``); otherwise the pipeline and the engine skip every mark, so an
unobserved server does no extra work. Times are ``time.time_ns()`` (the epoch nanoseconds tracing
systems take); marks are written by the event loop and the engine thread, each mark once.

The stages, in order, each between two marks (a stage whose end mark is missing is left out):

- ``tokenize``: the prompt rendered and tokenized;
- ``fence_build``: the request's fence composed and compiled (requests with no fence skip it);
- ``cache_lookup``: the cache plan (its tier, cached tokens and hit type are in ``cache``);
- ``restore``: the cached state loaded from a backup tier (SSD) and attached;
- ``prefill``: the prompt's uncached tokens computed, up to the first token;
- ``decode``: the first token to the end.

Besides the stages a trace holds what the request was and what it gave: its cache namespace, the
prompt's and the output's token ids, its time to first token and its decode rate. Warm-ups (prefill
only) are traced too, with ``finish_reason`` ``"warm"`` and no output.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Protocol

import attrs

from kvgate.core.plugins import collect

# stage name -> (start mark, end mark)
STAGES = {"tokenize": ("received", "tokenized"), "fence_build": ("tokenized", "fenced"),
          "cache_lookup": ("lookup", "planned"), "restore": ("planned", "attached"),
          "prefill": ("attached", "prefilled"), "decode": ("prefilled", "finished")}


@attrs.define
class Stage:
    name: str
    start_ns: int
    end_ns: int


@attrs.define
class CacheOutcome:
    """How the cache served the prompt (from the engine's plan)."""

    source: str = "cold"  # the tier's registered name, or "cold"
    hit_type: str = "miss"
    cached_tokens: int = 0
    cached_device: int = 0
    cached_ssd: int = 0


@attrs.define
class RequestTrace:
    request_id: str
    model: str
    tenant: str
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    marks: dict[str, int] = attrs.field(factory=lambda: {"received": time.time_ns()})
    cache: Optional[CacheOutcome] = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""  # "warm" for a warm-up (prefill only)
    error: Optional[str] = None
    namespace: str = ""  # the cache namespace the prompt's state is kept under
    prompt: list[int] = attrs.field(factory=list)  # the prompt's token ids
    output: list[int] = attrs.field(factory=list)  # the generated token ids
    ttft_s: Optional[float] = None  # seconds from the sequence's start to its first token (None: none)
    decode_tokens_per_s: Optional[float] = None  # after the first token (None with fewer than two)

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.time_ns())

    def note_plan(self, plan: Any) -> None:
        """Keep the cache plan's outcome (a :class:`kvgate.core.cache.plan.CachePlan` or the null
        cache's plan)."""
        self.cache = CacheOutcome(plan.source, plan.hit_type, plan.cached_tokens, plan.cached_device,
                                  plan.cached_ssd)

    def finish(self, plan: Any, reason: str, error: Optional[str] = None) -> None:
        """Mark the end and keep the cache plan (None when the request ended before its lookup)."""
        self.mark("finished")
        if plan is not None:
            self.note_plan(plan)
        self.finish_reason, self.error = reason, error

    @property
    def cached_device(self) -> int:
        return self.cache.cached_device if self.cache is not None else 0

    @property
    def cached_ssd(self) -> int:
        return self.cache.cached_ssd if self.cache is not None else 0

    @property
    def start_ns(self) -> int:
        return self.marks["received"]

    @property
    def end_ns(self) -> int:
        return self.marks.get("finished", max(self.marks.values()))

    def stages(self) -> list[Stage]:
        """The stages that ran, in order; ``restore`` only when a backup tier served the prompt."""
        out = []
        for name, (start, end) in STAGES.items():
            if start in self.marks and end in self.marks:
                if name == "restore" and (self.cache is None or not self.cache.cached_ssd):
                    continue
                out.append(Stage(name, self.marks[start], self.marks[end]))
        return out


def decode_rate(tokens: int, first_token_at: Optional[float], last_token_at: Optional[float]) -> Optional[float]:
    """Tokens per second after the first token (None with fewer than two tokens)."""
    if tokens < 2 or first_token_at is None or last_token_at is None or last_token_at <= first_token_at:
        return None
    return (tokens - 1) / (last_token_at - first_token_at)


class RequestObserver(Protocol):
    """Built by a ``register_request_observers`` plugin; called on the event loop."""

    def request_finished(self, trace: RequestTrace) -> None:
        """The request or warm-up ended (finished, cancelled or failed after it was admitted); must
        not raise and must return quickly (hand slow work, such as exporting, to a thread)."""


def build_observers(ctx, pm) -> list[RequestObserver]:
    """The ``register_request_observers`` observers this config runs (a builder may return None)."""
    builders = collect(pm, "register_request_observers", "request observer")
    built = [builders.get(name)(ctx) for name in builders.names()]
    return [observer for observer in built if observer is not None]

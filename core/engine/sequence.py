"""Per-request state inside the engine, and the messages the engine sends back."""

from __future__ import annotations

import enum
import itertools
from typing import Any, Callable, Optional

import attrs
import torch

from kvgate.core.engine.sampling import TokenLogprobs
from kvgate.core.runtime import Session
from kvgate.core.types import SamplingParams

_ids = itertools.count(1)


class Phase(enum.Enum):
    QUEUED = "queued"  # accepted, cache not yet planned
    LOADING = "loading"  # waiting for an SSD payload (readiness dependency)
    PREFILL = "prefill"  # prompt tokens still to compute
    DECODE = "decode"  # in the running batch
    DONE = "done"


@attrs.define
class TokenOut:
    token: int
    logprobs: Optional[TokenLogprobs] = None  # when the request asked for them


@attrs.define
class PrefillDone:
    """The prompt is in state; how much of it came from each source."""

    prompt_tokens: int
    cached_device: int
    cached_ssd: int
    retained: tuple[tuple[int, str], ...] = ()  # (position, ttl) of the marked prefixes the cache keeps
    replayed: int = 0  # tokens the runtime ran again to cut the cached state (CachePlan.replayed_tokens)


@attrs.define
class Planned:
    """The prefix cache's plan is final (after any SSD load): how many prompt tokens it provides.
    Sent only to a sequence with ``announce_plan``, before its ``PrefillDone``."""

    prompt_tokens: int
    cached_device: int
    cached_ssd: int
    retained: tuple[tuple[int, str], ...] = ()  # as PrefillDone's


@attrs.define
class SequenceDone:
    reason: str  # "stop" | "length" | "cancelled" | "error"
    error: Optional[BaseException] = None
    guard_interventions: int = 0
    guard_stop: bool = False  # a generation guard ended the reply (reason "stop"), not the model


EngineMessage = TokenOut | Planned | PrefillDone | SequenceDone


@attrs.define(eq=False)
class Sequence:
    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    stop_token_ids: frozenset[int]
    deliver: Callable[[EngineMessage], None]  # thread-safe; called on the engine thread
    namespace: str = ""
    cache_key: Optional[str] = None
    fence: Any = None  # kvgate.core.fence RequestFence or None
    generate: bool = True  # False: prefill only (warm-up)
    announce_plan: bool = False  # True: deliver a Planned message once the cache plan is final
    retention: Any = None  # kvgate.core.cache.pinning.Retention: marked prefixes to pin
    id: int = attrs.field(factory=lambda: next(_ids))
    phase: Phase = Phase.QUEUED
    plan: Any = None
    session: Optional[Session] = None
    output: list[int] = attrs.field(factory=list)
    generator: Optional[torch.Generator] = None
    next_logits: Optional[torch.Tensor] = None
    cancelled: bool = False
    stop_requested: bool = False
    prefilled: int = 0  # prompt tokens this engine computed for it (not those from the cache)
    trace: Any = None  # a kvgate.core.request_trace.RequestTrace while a request observer is registered

    def mark(self, name: str) -> None:
        """Note the time ``name`` happened, for request observers (nothing when none is registered)."""
        if self.trace is not None:
            self.trace.mark(name)

    @property
    def computed(self) -> int:
        return self.session.length if self.session is not None else 0

    def remaining_prompt(self) -> list[int]:
        return self.prompt[self.computed:]

    def budget_left(self) -> int:
        return self.max_tokens - len(self.output)

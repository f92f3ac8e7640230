"""The engine's cache when no prefix cache is configured: every request starts cold."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.core.runtime import ModelRuntime, Session


@attrs.define
class ColdPlan:
    namespace: str
    tokens: list[int]
    cache_key: Optional[str]
    source: str = "cold"
    hit_type: str = "miss"
    cached_tokens: int = 0
    cached_device: int = 0
    cached_ssd: int = 0
    replayed_tokens: int = 0
    needs_load: bool = False
    retained_marks: tuple = ()  # no cache keeps a marked prefix


class NullCache:
    def __init__(self, runtime: ModelRuntime):
        self.runtime = runtime

    def plan(self, namespace: str, tokens: list[int], cache_key: Optional[str], retention: Any = None) -> ColdPlan:
        return ColdPlan(namespace, tokens, cache_key)

    def load(self, plan: ColdPlan) -> None:
        return None

    def attach(self, plan: ColdPlan) -> Session:
        return self.runtime.new_session()

    def finish(self, namespace: str, session: Session, cache_key: Optional[str]) -> None:
        self.runtime.release(session)

    def pin(self, plan: ColdPlan, session: Session) -> None:
        return None

    def settle(self, plan: Optional[ColdPlan]) -> None:
        return None

    def discard(self, session: Session) -> None:
        self.runtime.release(session)

    def reclaim(self, blocks_needed: int) -> int:
        return 0

    def diagnostics(self) -> dict:
        return {"enabled": False}

    def close(self) -> None:
        return None

"""Restoring a backed-up snapshot into a pooled session (engine thread)."""

from __future__ import annotations

import logging
import time
from typing import Optional

import torch

from kvgate.core.cache.backup import is_pool_exhausted
from kvgate.core.cache.plan import CachePlan
from kvgate.core.runtime import Session

log = logging.getLogger("kvgate.cache")


class Restores:
    """Mixin of :class:`kvgate.core.cache.manager.CacheManager`: the upload half of a backup hit."""

    def _restore(self, plan: CachePlan) -> Optional[Session]:
        started = time.perf_counter()
        session = self.pool.take()
        try:
            self._import(session, plan.payload)
            plan.replayed_tokens = self.runtime.cut_replay_tokens(session, plan.cached_tokens)
            self.runtime.truncate(session, plan.cached_tokens)
        except Exception as exc:  # PoolExhausted after reclaiming, or a payload the runtime refuses
            log.warning("%s cache: restore of %s failed (%s); computing instead", plan.source, plan.snapshot.id, exc)
            self.pool.give(session)
            plan.go_resident()
            return None
        plan.backup.touch(plan.snapshot)
        plan.payload = None
        plan.restore_seconds += time.perf_counter() - started
        self.metrics.restore_seconds.observe(plan.restore_seconds)
        return session

    def _import(self, session: Session, payload: list) -> None:
        for attempt in (1, 2):
            try:
                with torch.inference_mode():  # the pool's tensors are inference tensors
                    for tokens, data in payload:
                        self.runtime.import_chunk(session, tokens, data)
                return
            except Exception as exc:
                if attempt == 2 or not is_pool_exhausted(exc):
                    raise
                self.runtime.truncate(session, 0)
                needed = -(-sum(len(t) for t, _ in payload) // self.runtime.block_size)
                self.reclaim(needed)


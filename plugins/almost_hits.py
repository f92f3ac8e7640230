"""Plugin: almost-hits, lookups that forked late inside a stored sequence (a lookup observer).

When the prompt shares at least ``min_tokens`` tokens and more than ``min_ratio`` of a stored
sequence but then diverges inside it, the miss is almost always a template, a re-rendered tool
call or a volatile header. A fork that loses at least ``expensive_tokens`` tokens the stored
sequence could have given the prompt is kept whatever its ratio. Each one is logged, counted, and
kept (the most recent ``keep``) with the fork position, the tokens lost, the tokens a fork there
replays (``replayed_tokens``: a hybrid model's recurrent state rebuilt from the nearest snapshot;
null on a backup tier), the decoded text on both
sides, and the token pieces on both sides (``stored_pieces``, ``prompt_pieces``: one string per
token from ``pieces_from``), which show a re-tokenization fork whose two sides read the same.
Settings: ``[cache] almost_hit_min_tokens``, ``almost_hit_min_ratio``; the cache diagnostics list
them under ``almost_hits`` and ``kvgate_cache_almost_hits`` counts them.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Optional, Sequence

from prometheus_client import Counter

from kvgate.core.cache.lookup_observers import Lookup
from kvgate.core.hookspecs import hookimpl

log = logging.getLogger("kvgate.cache")
EXPENSIVE_FORK_TOKENS = 2048
PIECES_AROUND_FORK = 8


def lost_tokens(prompt: Sequence[int], stored: Sequence[int], fork: int) -> int:
    """Tokens past the fork that the stored sequence could have given the prompt."""
    return max(0, min(len(prompt), len(stored)) - fork)


class AlmostHits:
    def __init__(self, tokenizer: Any, min_tokens: int, min_ratio: float, counter: Any,
                 keep: int = 32, context_tokens: int = 24, expensive_tokens: int = EXPENSIVE_FORK_TOKENS):
        self.tokenizer, self.min_tokens, self.min_ratio, self.counter = tokenizer, min_tokens, min_ratio, counter
        self.context_tokens = context_tokens
        self.expensive_tokens = expensive_tokens
        self.items: collections.deque[dict] = collections.deque(maxlen=keep)
        self.lock = threading.Lock()

    def qualifies(self, prompt: Sequence[int], stored: Sequence[int], fork: int) -> bool:
        inside = fork < len(stored) and fork < len(prompt)
        late = fork > self.min_ratio * len(stored) or lost_tokens(prompt, stored, fork) >= self.expensive_tokens
        return inside and fork >= self.min_tokens and late

    def record(self, namespace: str, tier: str, prompt: Sequence[int], stored: Sequence[int], fork: int,
               replayed: Optional[int] = None) -> dict:
        ctx, start = self.context_tokens, max(0, fork - PIECES_AROUND_FORK)
        item = {
            "time": time.time(), "namespace": namespace, "tier": tier, "fork_index": fork, "replayed_tokens": replayed,
            "stored_tokens": len(stored), "prompt_tokens": len(prompt), "shared_ratio": round(fork / len(stored), 4),
            "text_before": self._decode(prompt[max(0, fork - ctx):fork]),
            "stored_after": self._decode(stored[fork:fork + ctx]),
            "prompt_after": self._decode(prompt[fork:fork + ctx]),
            "lost_tokens": lost_tokens(prompt, stored, fork), "pieces_from": start,
            "stored_pieces": self._pieces(stored[start:fork + PIECES_AROUND_FORK]),
            "prompt_pieces": self._pieces(prompt[start:fork + PIECES_AROUND_FORK]),
        }
        with self.lock:
            self.items.append(item)
        self.counter.inc()
        log.info("prefix cache almost-hit (%s): forked at token %d of a stored sequence of %d (%d tokens lost); "
                 "stored %r, prompt %r", tier, fork, len(stored), item["lost_tokens"], item["stored_pieces"],
                 item["prompt_pieces"])
        return item

    def _decode(self, ids: Sequence[int]) -> str:
        try:
            return self.tokenizer.decode(list(ids), skip_special_tokens=False)
        except Exception:  # a diagnostic must never fail a request
            return repr(list(ids))

    def _pieces(self, ids: Sequence[int]) -> list[str]:
        return [self._decode([token_id]) for token_id in ids]

    def recent(self) -> list[dict]:
        with self.lock:
            return list(self.items)


class AlmostHitObserver:
    """:class:`kvgate.core.cache.lookup_observers.LookupObserver`: of a lookup's candidates that
    qualify, the one that forked latest is recorded."""

    def __init__(self, config, runtime, registry):
        settings = config.cache
        counter = Counter("kvgate_cache_almost_hits", "Lookups that forked late inside a stored sequence.",
                          registry=registry)
        self.hits = AlmostHits(runtime.tokenizer, settings.almost_hit_min_tokens, settings.almost_hit_min_ratio,
                               counter)

    def looked_up(self, lookup: Lookup) -> None:
        found = [c for c in lookup.candidates if self.hits.qualifies(lookup.prompt, c.tokens, c.shared)]
        if found:
            best = max(found, key=lambda candidate: candidate.shared)
            self.hits.record(lookup.namespace, best.tier, lookup.prompt, best.tokens, best.shared, best.replayed)

    def diagnostics(self) -> dict[str, Any]:
        return {"almost_hits": self.hits.recent()}


@hookimpl
def register_lookup_observers(register):
    register("almost_hits", AlmostHitObserver)

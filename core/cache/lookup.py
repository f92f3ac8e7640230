"""Planning a request: exact cache id, then longest prefix, on device and then on SSD.

A cache id is a hint: the candidate's tokens are compared with the prompt and only the verified
common prefix counts. The cached length always stays below the prompt length, so at least one
token is computed and yields logits.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from kvgate.core.cache.plan import RESTORE_COST, CachePlan


def best_candidate(tier: Any, namespace: str, tokens: Sequence[int], cache_key: Optional[str]):
    """``(entry, verified_length, hit_type, nearest_stored)`` of one tier."""
    by_id, id_length = tier.exact(namespace, cache_key, tokens)
    longest, length = tier.longest(namespace, tokens)
    if by_id is not None and id_length >= length:
        return by_id, id_length, "exact", by_id
    return longest, length, "prefix", longest


def hit_kind(kind: str, stored: Any, verified: int) -> str:
    return kind if verified >= len(stored.tokens) else "partial"


def fill_plan(plan: CachePlan, device: Any, ssd: Any, min_tokens: int):
    """Choose the source of ``plan``; returns the tiers consulted and the candidates they had
    (``(tier, stored entry, verified length)``, for almost-hit checks)."""
    tokens, limit = plan.tokens, len(plan.tokens) - 1
    seen: list[tuple[str, Any, int]] = []
    consulted: list[str] = []
    device_length = ssd_length = 0
    if device is not None:
        consulted.append("device")
        entry, length, kind, stored = best_candidate(device, plan.namespace, tokens, plan.cache_key)
        if entry is not None:
            seen.append(("device", stored, length))
            device_length = min(length, limit) if length >= min_tokens else 0
            if device_length:
                plan.device_entry, plan.device_tokens = entry, device_length
                plan.source, plan.cached_tokens, plan.hit_type = "device", device_length, hit_kind(kind, stored, length)
    if ssd is not None and device_length < limit:
        consulted.append("ssd")
        record, length, kind, stored = best_candidate(ssd, plan.namespace, tokens, plan.cache_key)
        if record is not None:
            seen.append(("ssd", stored, length))
            ssd_length = min(length, limit) if length >= min_tokens else 0
            n = len(tokens)
            if ssd_length and (n - ssd_length) + ssd_length * RESTORE_COST < n - device_length:
                plan.snapshot, plan.needs_load = record, True
                plan.source, plan.cached_tokens, plan.hit_type = "ssd", ssd_length, hit_kind(kind, stored, length)
    return consulted, seen

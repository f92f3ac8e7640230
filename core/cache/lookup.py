"""Planning a request: exact cache id, then longest prefix, on the resident tier and then on each
backup tier in order.

A cache id is a hint: the candidate's tokens are compared with the prompt and only the verified
common prefix counts. The cached length always stays below the prompt length, so at least one
token is computed and yields logits. A backup tier is consulted while the best source so far
leaves tokens to compute, and wins only when restoring is cheaper than what it replaces.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

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


def fill_plan(plan: CachePlan, resident: Optional[tuple[str, Any]], backups: Mapping[str, Any], min_tokens: int):
    """Choose the source of ``plan``; returns the tier names consulted and the candidates they had
    (``(tier name, stored entry, verified length)``, for lookup observers)."""
    tokens, limit = plan.tokens, len(plan.tokens) - 1
    seen: list[tuple[str, Any, int]] = []
    consulted: list[str] = []
    n = len(tokens)
    cost = float(n)  # tokens to compute (restored tokens count RESTORE_COST each)
    if resident is not None:
        name, tier = resident
        consulted.append(name)
        entry, length, kind, stored = best_candidate(tier, plan.namespace, tokens, plan.cache_key)
        if entry is not None:
            seen.append((name, stored, length))
            usable = min(length, limit) if length >= min_tokens else 0
            if usable:
                plan.use_resident(name, entry, usable, hit_kind(kind, stored, length))
                cost = n - usable
    for name, tier in backups.items():
        if plan.cached_tokens >= limit:
            break
        consulted.append(name)
        record, length, kind, stored = best_candidate(tier, plan.namespace, tokens, plan.cache_key)
        if record is None:
            continue
        seen.append((name, stored, length))
        usable = min(length, limit) if length >= min_tokens else 0
        if usable and (n - usable) + usable * RESTORE_COST < cost:
            plan.use_backup(name, tier, record, usable, hit_kind(kind, stored, length))
            cost = (n - usable) + usable * RESTORE_COST
    return consulted, seen

"""OpenAI ``prompt_cache_retention`` (Chat Completions and Responses) -> a retention hint.

``"24h"`` asks to keep the request's prompt cached for a day: the whole prompt is the marked
prefix (a later turn extends it). ``"in_memory"``, OpenAI's default policy, is kvgate's default
too (plain LRU): no hint. Any other value is a 400, as OpenAI answers it.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.errors import InvalidRequest
from kvgate.core.types import RetentionHint

POLICIES = {"in_memory": None, "24h": 24 * 3600.0}
DEFAULT_POLICY = "in_memory"


def applied_policy(body: dict[str, Any]) -> str:
    """The policy a response echoes: the request's, else the default (``in_memory``, plain LRU)."""
    policy = body.get("prompt_cache_retention")
    return policy if isinstance(policy, str) and policy in POLICIES else DEFAULT_POLICY


def retention_hints(body: dict[str, Any]) -> list[RetentionHint]:
    policy = body.get("prompt_cache_retention")
    if policy is None:
        return []
    if not isinstance(policy, str) or policy not in POLICIES:
        raise InvalidRequest("prompt_cache_retention: must be 'in_memory' or '24h'", param="prompt_cache_retention")
    seconds = POLICIES[policy]
    return [] if seconds is None else [RetentionHint(ttl=policy, ttl_seconds=seconds)]

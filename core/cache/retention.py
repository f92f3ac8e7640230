"""What a request asks the cache to retain, and what planning reserved for it: a request's marks
(:class:`Retention`, from the pipeline), each mark's reservation (:class:`Reserved`, on the plan)
and the byte budgets marks are admitted within (:func:`pin_budgets`)."""

from __future__ import annotations

from typing import Optional

import attrs

from kvgate.core.config import Config


@attrs.frozen
class RetentionMark:
    position: int  # prompt tokens the marked prefix holds
    ttl: str  # the label usage reports ("5m", "1h", "24h")
    ttl_seconds: float


@attrs.frozen
class Retention:
    """A request's marks and the tenant whose share they use."""

    tenant: str
    marks: tuple[RetentionMark, ...]


@attrs.define
class Reserved:
    mark: RetentionMark
    nbytes: int  # the pin's size (0: the prefix is pinned already)
    net: int = 0  # what it adds to its tenant's pins: less the shorter pins it replaces
    settled: bool = False  # pinned, or released


def pin_budgets(config: Config, device_bytes: int) -> tuple[int, Optional[int]]:
    """``(pinned budget, each tenant's part or None)``: a tenant's part is ``pinned_tenant_share``
    of the pinned budget, else an even split among the tenants the server's keys name."""
    settings = config.cache
    budget = int(device_bytes * settings.pinned_share)
    tenants = {key.tenant for key in config.server.keys} | ({"default"} if config.server.api_key else set())
    if settings.pinned_tenant_share:
        return budget, int(budget * settings.pinned_tenant_share)
    return budget, (budget // len(tenants) if tenants else None)

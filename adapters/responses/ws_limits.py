"""How many Responses WebSockets may be open: ``[server] max_websocket_connections`` per tenant,
``max_websocket_connections_total`` for all tenants together.

A tenant's own sockets count against its own limit only, so one tenant holding its sockets open
(idle or busy) never locks another out; the total only bounds the server's file descriptors and
memory. Which limit refused a socket is named in the refusal.
"""

from __future__ import annotations

import collections
from typing import Optional


class ConnectionLimits:
    """Open sockets per tenant and in all. Used on the event loop only, so it needs no lock."""

    def __init__(self, per_tenant: int, total: int):
        self.per_tenant, self.total = per_tenant, total
        self.open: collections.Counter[str] = collections.Counter()

    def acquire(self, tenant: str) -> Optional[str]:
        """Count a new socket of ``tenant``; or, when it must be refused, the reason (nothing counted)."""
        if self.open[tenant] >= self.per_tenant:
            return (f"Too many open WebSocket connections for this API key (limit {self.per_tenant}, "
                    "[server] max_websocket_connections); close one or reconnect later.")
        if sum(self.open.values()) >= self.total:
            return (f"Too many open WebSocket connections on this server (limit {self.total}, "
                    "[server] max_websocket_connections_total); reconnect later.")
        self.open[tenant] += 1
        return None

    def release(self, tenant: str) -> None:
        self.open[tenant] -= 1
        if self.open[tenant] <= 0:
            del self.open[tenant]

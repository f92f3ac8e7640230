"""What a lookup decided for one request: :class:`CachePlan`."""

from __future__ import annotations

from typing import Any, Optional

import attrs

# Restoring a token from SSD costs about this fraction of computing it (measured 50-70x faster on
# SmolLM2; 20x leaves room for slower disks): SSD wins over a shorter device hit only when the
# extra tokens it provides outweigh its read cost.
RESTORE_COST = 0.05


@attrs.define(eq=False)
class CachePlan:
    namespace: str
    tokens: list[int]
    cache_key: Optional[str]
    source: str = "cold"  # "device" | "ssd" | "cold"
    cached_tokens: int = 0
    needs_load: bool = False
    hit_type: str = "miss"  # "exact" (cache id) | "prefix" | "partial" (forked inside a stored sequence) | "miss"
    # private to the cache manager
    device_entry: Any = None
    device_tokens: int = 0
    snapshot: Any = None
    payload: Optional[list] = None
    restore_seconds: float = 0.0

    @property
    def cached_device(self) -> int:
        return self.cached_tokens if self.source == "device" else 0

    @property
    def cached_ssd(self) -> int:
        return self.cached_tokens if self.source == "ssd" else 0

    def go_device(self) -> None:
        """Fall back to the device candidate found at planning time (or cold when there is none)."""
        self.snapshot, self.payload, self.needs_load = None, None, False
        if self.device_entry is not None and self.device_tokens > 0:
            self.source, self.cached_tokens = "device", self.device_tokens
        else:
            self.go_cold()

    def go_cold(self) -> None:
        self.source, self.cached_tokens, self.needs_load = "cold", 0, False
        self.snapshot, self.payload, self.device_entry, self.device_tokens = None, None, None, 0
        self.hit_type = "miss"

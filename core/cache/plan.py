"""What a lookup decided for one request: :class:`CachePlan`."""

from __future__ import annotations

from typing import Any, Optional

import attrs

# Restoring a token from a backup tier costs about this fraction of computing it (measured 50-70x
# faster from SSD on SmolLM2; 20x leaves room for slower disks): a backup wins over a shorter
# resident hit only when the extra tokens it provides outweigh its read cost.
RESTORE_COST = 0.05


@attrs.define(eq=False)
class CachePlan:
    namespace: str
    tokens: list[int]
    cache_key: Optional[str]
    source: str = "cold"  # the registered name of the tier the cached state comes from, or "cold"
    cached_tokens: int = 0
    needs_load: bool = False
    hit_type: str = "miss"  # "exact" (cache id) | "prefix" | "partial" (forked inside a stored sequence) | "miss"
    # tokens the runtime ran again to cut the cached state at cached_tokens (set on attach):
    # auxiliary state that cannot be cut at a token, rebuilt from the nearest snapshot before it
    replayed_tokens: int = 0
    # private to the cache manager
    resident_name: str = ""
    resident_entry: Any = None  # the resident tier's candidate (kept as a fallback)
    resident_tokens: int = 0
    backup: Any = None  # the backup tier the snapshot comes from
    snapshot: Any = None
    payload: Optional[list] = None
    restore_seconds: float = 0.0
    retention: Any = None  # the request's kvgate.core.cache.pinning.Retention, if it marked prefixes
    retained: list = attrs.field(factory=list)  # its marks the cache reserved (pinning.Reserved)

    @property
    def retained_marks(self) -> tuple[tuple[int, str], ...]:
        """``(position, ttl label)`` of each mark this request makes the cache keep (usage reports
        what they write); a mark already pinned writes nothing and is left out."""
        return tuple((r.mark.position, r.mark.ttl) for r in self.retained if r.nbytes)

    @property
    def from_backup(self) -> bool:
        return self.backup is not None and self.source != "cold"

    @property
    def cached_device(self) -> int:
        """Cached tokens forked from the resident tier (usage reports them as ``device``)."""
        return self.cached_tokens if self.source != "cold" and not self.from_backup else 0

    @property
    def cached_ssd(self) -> int:
        """Cached tokens restored from a backup tier (usage reports them as ``ssd``)."""
        return self.cached_tokens if self.from_backup else 0

    def use_resident(self, name: str, entry: Any, length: int, hit_type: str) -> None:
        self.resident_name, self.resident_entry, self.resident_tokens = name, entry, length
        self.source, self.cached_tokens, self.hit_type = name, length, hit_type

    def use_backup(self, name: str, tier: Any, snapshot: Any, length: int, hit_type: str) -> None:
        self.backup, self.snapshot, self.needs_load = tier, snapshot, True
        self.source, self.cached_tokens, self.hit_type = name, length, hit_type

    def go_resident(self) -> None:
        """Fall back to the resident candidate found at planning time (or cold when there is none)."""
        self.backup, self.snapshot, self.payload, self.needs_load = None, None, None, False
        self.replayed_tokens = 0
        if self.resident_entry is not None and self.resident_tokens > 0:
            self.source, self.cached_tokens = self.resident_name, self.resident_tokens
        else:
            self.go_cold()

    def go_cold(self) -> None:
        self.source, self.cached_tokens, self.needs_load, self.replayed_tokens = "cold", 0, False, 0
        self.backup, self.snapshot, self.payload, self.resident_entry, self.resident_tokens = None, None, None, None, 0
        self.hit_type = "miss"

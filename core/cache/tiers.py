"""What a cache tier registers (:class:`TierSpec`) and what the cache manager calls on it.

A plugin's ``register_cache_tiers(register)`` calls ``register(name, TierSpec(role, build))``. The
role, never the name, decides what the manager does with the tier:

- ``"resident"`` (:class:`ResidentTier`): holds live sessions the engine forks from; at most one is
  enabled (two are a :class:`~kvgate.core.errors.ConfigError` naming both);
- ``"backup"`` (:class:`BackupTier`): holds exported state; every enabled one is consulted on
  lookup, backed up to and restored from, in ``(order, name)`` order.

The name is the tier's label in metrics, usage diagnostics and almost-hit records.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence

import attrs

from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.core.runtime import Session

ROLES = ("resident", "backup")


class TierUnavailable(RuntimeError):
    """Raised by a tier's ``build`` when it cannot run now (e.g. its store is in use): the tier is
    skipped with a warning and the server runs without it."""


def always(config: Any) -> bool:
    return True


@attrs.frozen
class TierSpec:
    """A registered tier: ``build(config, runtime)`` returns the tier when ``enabled(config)``."""

    role: str = attrs.field(validator=attrs.validators.in_(ROLES))
    build: Callable[[Any, Any], Any]
    enabled: Callable[[Any], bool] = always
    order: int = 100  # backups: lower is consulted, backed up to and restored from first


class ResidentEntry(Protocol):
    """One resident session of a :class:`ResidentTier` (the manager reads these, sets ``backed_up``
    and ``pinned``: a pinned entry holds a retained prefix, which the tier never evicts)."""

    namespace: str
    session: Session
    cache_key: Optional[str]
    round: int
    backed_up: bool
    pinned: bool

    @property
    def tokens(self) -> list[int]: ...

    @property
    def resident(self) -> bool:
        """False once the entry was removed."""


class ResidentTier(Protocol):
    """The tier of live sessions (engine thread only). Exactly the methods the manager calls."""

    def longest(self, namespace: str, tokens: Sequence[int]) -> tuple[Optional[ResidentEntry], int]:
        """The entry sharing the longest prefix with ``tokens`` and that prefix's verified length."""

    def exact(self, namespace: str, cache_key: Optional[str],
              tokens: Sequence[int]) -> tuple[Optional[ResidentEntry], int]:
        """The entry stored under ``cache_key`` and its verified common prefix with ``tokens``."""

    def touch(self, entry: ResidentEntry) -> None:
        """``entry`` was used now (eviction order)."""

    def admit(self, namespace: str, session: Session, cache_key: Optional[str]) -> tuple[ResidentEntry, bool]:
        """Take ``session`` over; returns its entry and whether it is new (an existing entry with the
        same tokens is kept instead, and ``session`` released)."""

    def remove(self, entry: ResidentEntry) -> None:
        """Forget ``entry`` and release its session."""

    def superseded(self, entry: ResidentEntry) -> list[ResidentEntry]:
        """Entries above ``entry`` that the prefix-round limit makes redundant (never a pinned one)."""

    def next_victim(self) -> Optional[ResidentEntry]:
        """The entry to evict next (never a pinned one), or None when nothing can go."""

    def pinned_bytes(self) -> int:
        """Real bytes held by the pinned entries (a block they share counts once)."""

    def over_budget(self) -> bool:
        """Whether entries must be evicted before admitting more."""

    def entries(self) -> list[ResidentEntry]:
        """Every resident entry."""

    def resident_bytes(self) -> int:
        """Real bytes held by the resident entries."""

    def aux_bytes(self) -> int:
        """Real bytes of the auxiliary state (recurrent-state snapshots...) the resident entries'
        sessions hold beside their blocks (:meth:`~kvgate.core.runtime.ModelRuntime.aux_state_bytes`);
        released with their entries."""

    def stats(self) -> dict:
        """A JSON-able summary for diagnostics."""

    def close(self) -> None:
        """The server stops: release what the tier holds (its entries were backed up first)."""


class StoredSnapshot(Protocol):
    """A snapshot a :class:`BackupTier` holds: its ``id`` and exact ``tokens``."""

    id: str
    tokens: list[int]


class BackupTier(Protocol):
    """A tier of exported state. Engine thread unless noted. Exactly the methods the manager calls."""

    def bind(self, metrics: Any, name: str) -> None:
        """Called once by the manager: its :class:`~kvgate.core.cache.metrics.CacheMetrics` (register
        the tier's own metrics on ``metrics.registry``) and the tier's registered name (its label)."""

    def longest(self, namespace: str, tokens: Sequence[int]) -> tuple[Optional[StoredSnapshot], int]:
        """The snapshot sharing the longest prefix with ``tokens`` and that prefix's verified length."""

    def exact(self, namespace: str, cache_key: Optional[str],
              tokens: Sequence[int]) -> tuple[Optional[StoredSnapshot], int]:
        """The snapshot stored under ``cache_key`` and its verified common prefix with ``tokens``."""

    def pin_known(self, keys: Sequence[bytes]) -> set[int]:
        """Pin the chunks ``keys`` until the snapshot naming them is submitted (or :meth:`unpin`);
        returns the indexes of those already held or queued (they are not exported)."""

    def unpin(self, keys: Sequence[bytes]) -> None:
        """Undo :meth:`pin_known` when no snapshot is submitted after all."""

    def submit(self, pending: PendingSnapshot, wait: bool) -> bool:
        """Store ``pending`` (maybe later); False when the tier is busy and ``wait`` is False."""

    def read(self, snapshot: StoredSnapshot, tokens_needed: int) -> list[tuple[list[int], bytes]]:
        """Any thread: ``(tokens, export_chunk data)`` of the chunks covering the first
        ``tokens_needed`` tokens, validated; raises :class:`~kvgate.core.cache.snapshot.BadChunk`."""

    def drop_bad(self, snapshot: StoredSnapshot, reason: str, bad_key: Optional[bytes]) -> None:
        """Forget a snapshot whose read raised BadChunk (and the bad chunk ``bad_key``)."""

    def touch(self, snapshot: StoredSnapshot) -> None:
        """``snapshot`` was restored now (eviction order)."""

    def retain(self, namespace: str, tokens: Sequence[int], seconds: float) -> None:
        """Keep the snapshot of exactly ``tokens`` (a pinned prefix; it may not be committed yet)
        and its chunks for ``seconds`` from now: neither eviction nor the round limit drops it
        before then. A later call may extend the deadline, never shorten it."""

    def stats(self) -> dict:
        """A JSON-able summary for diagnostics."""

    def close(self) -> None:
        """Finish queued work and release the tier's resources (the server stops)."""


@attrs.define
class Tiers:
    """The built tiers: at most one resident, the backups in lookup order, and every registered name."""

    resident: Optional[ResidentTier] = None
    resident_name: str = ""
    backups: dict[str, BackupTier] = attrs.field(factory=dict)
    registered: tuple[str, ...] = ()

    def by_name(self) -> dict[str, Any]:
        named = {self.resident_name: self.resident} if self.resident is not None else {}
        return {**named, **self.backups}

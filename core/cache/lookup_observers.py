"""The lookup-observer plugin interface: what the cache manager tells plugins about each lookup.

An observer is contributed through ``register_lookup_observers`` (e.g. ``almost_hits``, which keeps
the lookups that forked late inside a stored sequence).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence

import attrs

from kvgate.core.config import Config
from kvgate.core.plugins import collect


@attrs.frozen
class Candidate:
    """The stored sequence nearest the prompt on one tier."""

    tier: str  # the tier's registered name
    tokens: Sequence[int]
    shared: int  # tokens it was verified to share with the prompt
    # tokens a fork of it at ``shared`` runs again (ModelRuntime.cut_replay_tokens); None on a backup
    # tier, whose stored state the lookup does not open
    replayed: Optional[int] = None


@attrs.frozen
class Lookup:
    namespace: str
    prompt: Sequence[int]
    candidates: tuple[Candidate, ...]  # one per consulted tier that had one, in lookup order


class LookupObserver(Protocol):
    """Built once per cache manager."""

    def looked_up(self, lookup: Lookup) -> None:
        """After each lookup of a prompt, on the engine thread: must return quickly and must not
        raise."""

    def diagnostics(self) -> dict[str, Any]:
        """Keys this observer adds to the cache's diagnostics (any thread)."""


LookupObserverBuild = Callable[[Config, Any, Any], LookupObserver]


def build_lookup_observers(pm, config: Config, runtime: Any, registry: Any) -> list[LookupObserver]:
    """One observer of every ``register_lookup_observers`` plugin, in name order."""
    builders = collect(pm, "register_lookup_observers", "lookup observer")
    return [builders.get(name)(config, runtime, registry) for name in builders.names()]

"""Plugin: the SSD tier, a backup tier of the prefix cache (content-addressed chunks and a manifest).

- :mod:`.tier` -- :class:`~.tier.SsdTier`, the backup tier: index, writer thread, metrics;
- :mod:`.store` -- the store: chunk files plus the manifest that names snapshots;
- :mod:`.chunk_format`, :mod:`.chunk_files` -- one chunk on disk (versioned), written durably;
- :mod:`.records`, :mod:`.manifest` -- snapshot records (versioned) in a diskcache database;
- :mod:`.index` -- the in-memory prefix index of committed snapshots;
- :mod:`.inspect`, :mod:`.cli` -- ``kvgate cache ls | inspect | diagnose | clear``.

At start a damaged store is moved aside and an empty one opened, an unwritable ``ssd_path``
disables the tier (:func:`kvgate.core.disk_state.open_or_set_aside`); the server starts either way.

Several workers may share one ``ssd_path`` (processes on one host, or hosts on one shared file
system): see :mod:`.store` for the design (reference counts, holders with leases, a change log).

Settings: ``[cache] ssd_enabled``, ``ssd_path`` (default ``<state dir>/ssd``), ``ssd_bytes`` (the
whole store's bound, shared), ``ssd_worker_id`` (default: unique per process), ``chunk_tokens``,
``prefix_rounds``.
"""

from __future__ import annotations

from kvgate.core.cache.tiers import TierSpec
from kvgate.core.hookspecs import hookimpl


def enabled(config) -> bool:
    return config.cache.ssd_enabled


def build_tier(config, runtime):
    """A :class:`kvgate.plugins.cache_ssd.tier.SsdTier` under ``<state dir>/ssd`` (or cache.ssd_path)."""
    from kvgate.plugins.cache_ssd.tier import SsdTier

    settings = config.cache
    root = config.path_in_state(settings.ssd_path, "ssd")
    return SsdTier(root, settings.chunk_tokens, settings.ssd_bytes, runtime.state_format, settings.prefix_rounds,
                   worker_id=settings.ssd_worker_id)


@hookimpl
def register_cache_tiers(register):
    register("ssd", TierSpec(role="backup", build=build_tier, enabled=enabled))

"""Plugin: the SSD tier of the prefix cache (content-addressed chunks and a diskcache manifest)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl


def build_tier(config, runtime):
    """A :class:`kvgate.core.cache.ssd_tier.SsdTier` under ``<state dir>/ssd`` (or cache.ssd_path)."""
    from kvgate.core.cache.build import build_ssd_tier

    return build_ssd_tier(config, runtime)


@hookimpl
def register_cache_tiers(register):
    register("ssd", build_tier)

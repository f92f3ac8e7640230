"""Plugin: the device tier of the prefix cache (resident sessions in a prefix graph)."""

from __future__ import annotations

from kvgate.core.hookspecs import hookimpl


def build_tier(config, runtime):
    """A :class:`kvgate.core.cache.device.DeviceTier` for ``runtime`` (config.cache settings)."""
    from kvgate.core.cache.build import build_device_tier

    return build_device_tier(config, runtime)


@hookimpl
def register_cache_tiers(register):
    register("device", build_tier)

"""Plugin: the device tier, the resident tier of the prefix cache (live sessions in a prefix graph).

Settings: ``[cache] device_bytes``, ``decode_reserve_tokens``, ``prefix_rounds``.
"""

from __future__ import annotations

from kvgate.core.cache.tiers import TierSpec
from kvgate.core.hookspecs import hookimpl


def build_tier(config, runtime):
    """A :class:`kvgate.plugins.cache_device.tier.DeviceTier` for ``runtime`` (config.cache settings)."""
    from kvgate.plugins.cache_device.tier import DeviceTier

    settings = config.cache
    return DeviceTier(runtime, settings.device_bytes, settings.decode_reserve_tokens, settings.prefix_rounds)


@hookimpl
def register_cache_tiers(register):
    register("device", TierSpec(role="resident", build=build_tier))

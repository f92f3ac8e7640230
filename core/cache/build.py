"""Building the cache manager from the ``register_cache_tiers`` plugins and the config."""

from __future__ import annotations

import logging
from typing import Any

from kvgate.core.cache.device import DeviceTier
from kvgate.core.cache.manager import CacheManager
from kvgate.core.cache.ssd_store import StoreBusy
from kvgate.core.cache.ssd_tier import SsdTier
from kvgate.core.config import Config
from kvgate.core.plugins import collect
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate.cache")


def build_device_tier(config: Config, runtime: ModelRuntime) -> DeviceTier:
    settings = config.cache
    return DeviceTier(runtime, settings.device_bytes, settings.decode_reserve_tokens, settings.prefix_rounds)


def build_ssd_tier(config: Config, runtime: ModelRuntime) -> SsdTier:
    settings = config.cache
    root = config.path_in_state(settings.ssd_path, "ssd")
    return SsdTier(root, settings.chunk_tokens, settings.ssd_bytes, runtime.state_bytes_per_token(),
                   settings.prefix_rounds)


def build_tiers(config: Config, runtime: ModelRuntime, pm: Any) -> dict[str, Any]:
    """Every registered tier the config enables, by name; an SSD store in use elsewhere is skipped."""
    tiers: dict[str, Any] = {}
    if not config.cache.enabled:
        return tiers
    registry = collect(pm, "register_cache_tiers", "cache tier")
    for name in registry.names():
        if name == "ssd" and not config.cache.ssd_enabled:
            continue
        try:
            tiers[name] = registry.get(name)(config, runtime)
        except StoreBusy as exc:
            log.warning("cache tier %s disabled: %s", name, exc)
    return tiers


def build_cache_manager(config: Config, runtime: ModelRuntime, pm: Any, metrics_registry: Any = None) -> CacheManager:
    return CacheManager(config, runtime, build_tiers(config, runtime, pm), metrics_registry)

"""Building the cache manager from the ``register_cache_tiers`` plugins and the config."""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry

from kvgate.core.cache.lookup_observers import build_lookup_observers
from kvgate.core.cache.manager import CacheManager
from kvgate.core.cache.tiers import Tiers, TierSpec, TierUnavailable
from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import Registry, collect
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate.cache")


def tier_specs(pm: Any) -> tuple[Registry, dict[str, TierSpec]]:
    registry = collect(pm, "register_cache_tiers", "cache tier")
    specs = {}
    for name in registry.names():
        spec = registry.get(name)
        if not isinstance(spec, TierSpec):
            raise TypeError(f"cache tier {name!r} (plugin {registry.owners[name]!r}) registered "
                            f"{type(spec).__name__}, not a TierSpec")
        specs[name] = spec
    return registry, specs


def enabled_specs(config: Config, specs: dict[str, TierSpec], registry: Registry) -> dict[str, TierSpec]:
    """The specs the config enables: one resident at most, then the backups in ``(order, name)`` order."""
    enabled = {name: spec for name, spec in specs.items() if spec.enabled(config)}
    residents = [name for name, spec in enabled.items() if spec.role == "resident"]
    if len(residents) > 1:
        owners = ", ".join(f"{name!r} (plugin {registry.owners[name]!r})" for name in residents)
        raise ConfigError(f"cache: {len(residents)} resident cache tiers are enabled: {owners}; "
                          "disable all but one (plugins.disabled)")
    backups = sorted((name for name, spec in enabled.items() if spec.role == "backup"),
                     key=lambda name: (enabled[name].order, name))
    return {name: enabled[name] for name in residents + backups}


def build_tier_set(config: Config, runtime: ModelRuntime, pm: Any) -> Tiers:
    """Every tier the config enables, built; a tier whose build raises (TierUnavailable or any other
    error, e.g. from damaged on-disk state) is skipped with a warning."""
    registry, specs = tier_specs(pm)
    tiers = Tiers(registered=tuple(specs))
    if not config.cache.enabled:
        return tiers
    for name, spec in enabled_specs(config, specs, registry).items():
        try:
            tier = spec.build(config, runtime)
        except TierUnavailable as exc:
            log.warning("cache tier %s disabled: %s", name, exc)
            continue
        except Exception as exc:  # a tier that fails to open its state must not stop the server
            log.warning("cache tier %s disabled: building it failed (%s: %s)", name, type(exc).__name__, exc,
                        exc_info=True)
            continue
        if spec.role == "resident":
            tiers.resident, tiers.resident_name = tier, name
        else:
            tiers.backups[name] = tier
    return tiers


def build_tiers(config: Config, runtime: ModelRuntime, pm: Any) -> dict[str, Any]:
    """Every built tier by registered name (see :func:`build_tier_set`)."""
    return build_tier_set(config, runtime, pm).by_name()


def build_cache_manager(config: Config, runtime: ModelRuntime, pm: Any, metrics_registry: Any = None) -> CacheManager:
    registry = metrics_registry if metrics_registry is not None else CollectorRegistry()
    return CacheManager(config, runtime, build_tier_set(config, runtime, pm), registry,
                        build_lookup_observers(pm, config, runtime, registry))

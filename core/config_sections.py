"""Step two of loading a configuration: the TOML sections that plugins declare for themselves.

A plugin declares ``[name]`` through the ``register_config_sections`` hook with an attrs class;
:func:`bind_plugin_sections` structures every declared section (its defaults when the file has
none) with the same key-naming errors as the core sections, and rejects a top-level table that
neither core nor a loaded plugin declares. A table that belongs to a disabled plugin is ignored
with a one-line warning. Afterwards ``config.section(name)`` returns the structured instance.
:func:`load_config` takes both steps.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

import pluggy

from kvgate.core.config import CORE_SECTIONS, Config, read_config, structure_section
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import DuplicateName, Registry, build_plugin_manager, collect, installed_entry_points

log = logging.getLogger("kvgate.config")


def declared_sections(pm: pluggy.PluginManager) -> Registry:
    """Section name -> attrs class, from every loaded plugin; a core section's name is an error."""
    registry = collect(pm, "register_config_sections", "config section")
    for name in registry.names():
        if name in CORE_SECTIONS:
            raise DuplicateName(f"config section {name!r} of plugin {registry.owners[name]!r} is a core section")
    return registry


def disabled_owners(config: Config, pm: pluggy.PluginManager) -> dict[str, str]:
    """Section name -> disabled plugin, for the disabled plugins' own names and the sections their
    entry points declare (loaded for this question only; one that fails to load declares none)."""
    disabled = set(config.plugins.disabled)
    entry_points = {ep.name: ep for ep in installed_entry_points()}
    disabled |= {name for name in entry_points if pm.is_blocked(name)}
    owners = {name: name for name in disabled}
    for name in sorted(disabled & set(entry_points)):
        try:
            declare = getattr(entry_points[name].load(), "register_config_sections", None)
            if declare is not None:
                declare(lambda section, _cls, owner=name: owners.setdefault(section, owner))
        except Exception:  # a plugin disabled because it is broken must not break loading
            continue
    return owners


def bind_plugin_sections(config: Config, pm: pluggy.PluginManager) -> Config:
    """Structure ``config``'s plugin sections for ``pm``; raises ConfigError naming each bad key.

    Binding again to the same manager does nothing; binding to another keeps the instances whose
    class that manager declares too (settings changed in code stay), and structures the rest.
    """
    if config.is_bound_to(pm):
        return config
    registry = declared_sections(pm)
    tables = config.plugin_tables
    kept = config.bound_sections()
    sections: dict[str, Any] = {}
    problems: list[str] = []
    for name in registry.names():
        cls = registry.get(name)
        if isinstance(kept.get(name), cls):
            sections[name] = kept[name]
            continue
        instance, errors = structure_section(name, tables.get(name, {}), cls)
        sections[name] = instance
        problems.extend(errors)
    unknown = [name for name in tables if name not in registry]
    ignored = disabled_owners(config, pm) if unknown else {}
    for name in unknown:
        if name in ignored:
            log.warning("config section [%s] ignored: plugin %r is disabled", name, ignored[name])
        else:
            problems.append(f"{name}: unknown key")
    if problems:
        raise ConfigError(f"{config.source}: {'; '.join(problems)}")
    config.set_sections(sections, pm)
    return config


def load_config(path: Optional[str | os.PathLike] = None, overrides: Optional[dict[str, Any]] = None,
                pm: Any = None) -> Config:
    """Both steps: :func:`kvgate.core.config.read_config`, then every plugin section structured by
    :func:`bind_plugin_sections` for ``pm`` (default: a plugin manager of the installed plugins,
    less ``[plugins] disabled``)."""
    config = read_config(path, overrides)
    return bind_plugin_sections(config, pm or build_plugin_manager(disabled=config.plugins.disabled))

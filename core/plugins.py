"""Plugin manager factory and the registries that registry hooks fill.

Nothing is loaded at import time: :func:`build_plugin_manager` builds a fresh manager, so tests
can build their own with extra or fewer plugins.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable, Iterable, Optional

import pluggy

from kvgate.core import hookspecs

ENTRY_POINT_GROUP = "kvgate"


class DuplicateName(ValueError):
    """Two plugins registered the same name in one registry."""


def build_plugin_manager(
    disabled: Iterable[str] = (),
    extra_plugins: Iterable[tuple[str, object]] = (),
    load_entry_points: bool = True,
) -> pluggy.PluginManager:
    """Build a plugin manager with every ``kvgate`` entry point loaded, except ``disabled`` ones."""
    pm = pluggy.PluginManager("kvgate")
    pm.add_hookspecs(hookspecs)
    for name in disabled:
        pm.set_blocked(name)
    if load_entry_points:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for name, plugin in extra_plugins:
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    return pm


class Registry:
    """Name -> object, filled by one registry hook. A duplicate name is an error, never an override."""

    def __init__(self, kind: str):
        self.kind = kind
        self.entries: dict[str, Any] = {}
        self.owners: dict[str, str] = {}

    def register_from(self, owner: str) -> Callable[[str, Any], None]:
        def register(name: str, value: Any) -> None:
            if name in self.entries:
                raise DuplicateName(
                    f"{self.kind} {name!r} is registered twice: by {self.owners[name]!r} and by {owner!r}"
                )
            self.entries[name] = value
            self.owners[name] = owner

        return register

    def get(self, name: str) -> Any:
        try:
            return self.entries[name]
        except KeyError:
            known = ", ".join(sorted(self.entries)) or "none"
            raise KeyError(f"no {self.kind} named {name!r} (registered: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def names(self) -> list[str]:
        return sorted(self.entries)


def collect(pm: pluggy.PluginManager, hook_name: str, kind: str) -> Registry:
    """Call one registry hook on every plugin, giving each its own ``register`` callback."""
    registry = Registry(kind)
    caller = getattr(pm.hook, hook_name)
    for impl in caller.get_hookimpls():
        owner = pm.get_name(impl.plugin) or repr(impl.plugin)
        impl.function(registry.register_from(owner))
    return registry


def distribution_of(pm: pluggy.PluginManager, plugin: object) -> Optional[str]:
    """The distribution ("name version") a plugin came from, when it was loaded from an entry point."""
    for loaded, dist in pm.list_plugin_distinfo():
        if loaded is plugin:
            return f"{dist.metadata['name']} {dist.version}"
    return None


def describe_plugins(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Name, distribution and implemented hooks of every registered plugin."""
    rows = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        hooks = sorted(impl.name for impl in pm.get_hookcallers(plugin) or [])
        rows.append({"name": name, "distribution": distribution_of(pm, plugin), "hooks": hooks})
    return rows


def installed_entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=ENTRY_POINT_GROUP))

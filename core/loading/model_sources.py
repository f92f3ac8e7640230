"""What a model path holds, and which model is served when none is configured, asked of plugins.

A model-format plugin reads a path into a :class:`~kvgate.core.runtime.ModelSource` (its kind and
architecture names, no weights); a default-model plugin names the path served when ``model.path``
is empty (the embedded model). The host knows no format and no model of its own; two formats
reading one path, or two default models, are errors.
"""

from __future__ import annotations

import os

import pluggy

from kvgate.core.errors import ConfigError
from kvgate.core.plugins import Registry, collect
from kvgate.core.runtime import ModelSource


def _listed(registry: Registry) -> str:
    return ", ".join(f"{name} ({registry.owners[name]})" for name in registry.names()) or "none"


def default_model_path(pm: pluggy.PluginManager) -> str:
    """The path of the one registered default model; a :class:`ConfigError` when there is none or several."""
    defaults = collect(pm, "register_default_models", "default model")
    if len(defaults.names()) != 1:
        raise ConfigError(f"model.path: empty, and {len(defaults.names())} default models are registered "
                          f"({_listed(defaults)}); set model.path or keep exactly one")
    try:
        return defaults.get(defaults.names()[0])()
    except Exception as exc:  # a missing embedded model says how to install it
        raise ConfigError(f"model.path: empty, and {exc}") from None


def read_model_source(pm: pluggy.PluginManager, path: str) -> ModelSource:
    """The source at ``path`` (``~`` expanded), as read by the one model format that claims it."""
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise ConfigError(f"model.path: {path} does not exist")
    formats = collect(pm, "register_model_formats", "model format")
    sources: dict[str, ModelSource] = {}
    for kind in formats.names():
        try:
            source = formats.get(kind)(path)
        except ValueError as exc:
            raise ConfigError(f"model.path: {exc}") from None
        if source is not None:
            sources[kind] = source
    if not sources:
        raise ConfigError(f"model.path: {path} is in no registered model format (registered: {_listed(formats)})")
    if len(sources) > 1:
        raise ConfigError(f"model.path: {path} is claimed by several model formats ({', '.join(sources)})")
    return next(iter(sources.values()))

"""Load the model runtime for the configured model (the dialect is chosen in :mod:`kvgate.core.dialect_choice`)."""

from __future__ import annotations

import logging

import pluggy

from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.model_runtimes import choose_runtime, collect_runtimes
from kvgate.core.model_sources import default_model_path, read_model_source
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate")


def load_runtime(config: Config, pm: pluggy.PluginManager) -> ModelRuntime:
    """Read the configured model's source, choose the runtime that declares its architecture, load it."""
    source = read_model_source(pm, config.model.path or default_model_path(pm))
    runtimes = collect_runtimes(pm)
    name = choose_runtime(runtimes, source)
    log.info("loading %s (%s, %s) with the %s runtime", source.path, source.kind, source.architecture, name)
    cache_dir = str(config.path_in_state("", "models"))
    try:
        return runtimes.get(name).load(source, config.model, config.engine, cache_dir)
    except ValueError as exc:  # a model that cannot be served as configured: one line, no traceback
        message = str(exc)
        raise ConfigError(message if message.startswith("model.") else f"model.path: {message}") from None

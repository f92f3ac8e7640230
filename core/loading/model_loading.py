"""Load the model runtime for the configured model (the dialect is chosen in :mod:`kvgate.core.loading.dialect_choice`)."""

from __future__ import annotations

import logging
import threading
from typing import Callable, TypeVar

import pluggy

from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.loading.model_runtimes import choose_runtime, collect_runtimes
from kvgate.core.loading.model_sources import default_model_path, read_model_source
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate")
T = TypeVar("T")


def on_passing_thread(work: Callable[[], T]) -> T:
    """``work()`` on a thread that ends with it; its result, or its exception raised here.

    torch's OpenMP runtime gives every thread that runs a parallel op a team of worker threads of its
    own, kept until that thread ends. Once the process holds more of them than it has CPUs, every
    team's workers sleep between ops instead of spinning, and each op waits for their wake-up: the
    engine thread decoded ~13 % slower when the model had been loaded on the main thread (measured on
    2 cores). Loading on a passing thread leaves the engine thread's team the only one.
    """
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 (re-raised on the caller's thread)
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="kvgate-load-model", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def load_runtime(config: Config, pm: pluggy.PluginManager) -> ModelRuntime:
    """Read the configured model's source, choose the runtime that declares its architecture, load it."""
    source = read_model_source(pm, config.model.path or default_model_path(pm))
    runtimes = collect_runtimes(pm)
    name = choose_runtime(runtimes, source)
    log.info("loading %s (%s, %s) with the %s runtime", source.path, source.kind, source.architecture, name)
    cache_dir = str(config.path_in_state(config.model.weights_cache_dir, "models"))
    try:
        runtime = runtimes.get(name).load(source, config.model, config.engine, cache_dir)
    except ValueError as exc:  # a model that cannot be served as configured: one line, no traceback
        message = str(exc)
        raise ConfigError(message if message.startswith("model.") else f"model.path: {message}") from None
    try:
        runtime.set_state_stride(config.cache.state_stride)
    except ValueError as exc:  # a stride the model's snapshots cannot use, e.g. off its chunk size
        raise ConfigError(str(exc)) from None
    return runtime

"""Which registered drafter (``register_drafters``) the engine's speculative step drafts with.

Every drafter's build sees the ``[engine]`` config and answers when it is asked for (see
:data:`kvgate.core.drafter.DrafterBuild`); the host knows no drafter by name. A name in
``[engine] speculative`` must be registered; at most one drafter may answer; and a config that
asks for speculation that no drafter answers (its plugin disabled) is an error, never a silent
fall back to plain decoding.
"""

from __future__ import annotations

from typing import Optional

import pluggy

from kvgate.core.config import EngineConfig
from kvgate.core.drafter import Drafter
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import Registry, build_plugin_manager, collect
from kvgate.core.runtime import ModelRuntime


def drafter_registry(pm: Optional[pluggy.PluginManager] = None) -> Registry:
    """The drafters ``pm``'s plugins register (every installed plugin's when None)."""
    return collect(pm if pm is not None else build_plugin_manager(), "register_drafters", "drafter")


def registered(drafters: Registry) -> str:
    return ", ".join(drafters.names()) or "none"


def check_drafter_named(config: EngineConfig, drafters: Registry) -> None:
    """A ConfigError when ``[engine] speculative`` names no registered drafter."""
    if config.speculative and config.speculative not in drafters:
        raise ConfigError(f"engine.speculative: no drafter named {config.speculative!r} is registered "
                          f"(registered drafters: {registered(drafters)})")


def choose_drafter(config: EngineConfig, runtime: Optional[ModelRuntime], drafters: Registry) -> Optional[Drafter]:
    """The drafter ``config`` asks for, or None when it asks for no speculation."""
    check_drafter_named(config, drafters)
    answers = {name: drafter for name in drafters.names()
               if (drafter := drafters.get(name)(runtime, config)) is not None}
    if len(answers) > 1:
        raise ConfigError(f"[engine]: drafters {', '.join(answers)} all answer this config; "
                          "name one with engine.speculative")
    if config.speculative and config.speculative not in answers:
        raise ConfigError(f"engine.speculative = {config.speculative!r}: that drafter declined this [engine] "
                          f"config (answered instead: {', '.join(answers) or 'none'})")
    asked = ", ".join(f"{key} = {value!r}" for key, value in config.speculation_keys.items())
    if asked and not answers:
        raise ConfigError(f"[engine] {asked} asks for speculative decoding, but no registered drafter "
                          f"answers it (registered drafters: {registered(drafters)}); is its plugin "
                          "disabled in [plugins] disabled?")
    return next(iter(answers.values()), None)

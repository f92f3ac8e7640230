"""Choose and load the model runtime, dialect and chat format for the configured model."""

from __future__ import annotations

import logging

import pluggy

from kvgate.core.chat_format import JinjaChatFormat
from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.model_runtimes import choose_runtime, collect_runtimes
from kvgate.core.model_sources import default_model_path, read_model_source
from kvgate.core.plugins import collect
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate")


def load_runtime(config: Config, pm: pluggy.PluginManager) -> ModelRuntime:
    """Read the configured model's source, choose the runtime that declares its architecture, load it."""
    source = read_model_source(pm, config.model.path or default_model_path(pm))
    runtimes = collect_runtimes(pm)
    name = choose_runtime(runtimes, source)
    log.info("loading %s (%s, %s) with the %s runtime", source.path, source.kind, source.architecture, name)
    cache_dir = str(config.path_in_state("", "models"))
    return runtimes.get(name).load(source, config.model, config.engine, cache_dir)


def choose_dialect_name(config: Config, runtime: ModelRuntime) -> str:
    """Config first, else from the architecture and the chat template."""
    if config.model.dialect:
        return config.model.dialect
    template = runtime.chat_template or ""
    architecture = runtime.info.architecture.lower()
    if "deepseek" in architecture:
        return "deepseek_dsml"
    if "<arg_key>" in template or architecture.startswith("glm"):
        return "glm_xml"
    return "chatml_json"


def build_chat_format(config: Config, pm: pluggy.PluginManager, runtime: ModelRuntime):
    """The dialect and chat format serving this model."""
    dialects = collect(pm, "register_dialects", "dialect")
    dialect_name = choose_dialect_name(config, runtime)
    if dialect_name not in dialects:
        raise ConfigError(f"model.dialect: unknown dialect {dialect_name!r} (registered: {', '.join(dialects.names())})")
    dialect = dialects.get(dialect_name)()
    if config.model.chat_format and config.model.chat_format != "jinja":
        formats = collect(pm, "register_chat_formats", "chat format")
        if config.model.chat_format not in formats:
            raise ConfigError(f"model.chat_format: unknown chat format {config.model.chat_format!r} "
                              f"(registered: jinja, {', '.join(formats.names())})")
        return dialect_name, dialect, formats.get(config.model.chat_format)(runtime, dialect)
    if not runtime.chat_template:
        raise ConfigError("model.chat_format: the model has no chat template; choose a chat format")
    return dialect_name, dialect, JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens)

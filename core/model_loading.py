"""Choose and load the model runtime, dialect and chat format for the configured model."""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

import pluggy

from kvgate.core.chat_format import JinjaChatFormat
from kvgate.core.config import Config
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import collect
from kvgate.core.runtime import ModelRuntime, ModelSource

log = logging.getLogger("kvgate")

GGUF_STRING = 8


def embedded_model_path() -> str:
    try:
        from kvgate.models.embedded import embedded_gguf_path
    except ImportError:
        raise ConfigError("model.path: empty and the embedded model runtime (kvgate.models) is missing") from None
    try:
        return embedded_gguf_path()
    except Exception as exc:
        raise ConfigError(f"model.path: empty, and {exc}") from None


def gguf_architecture(path: str) -> str:
    """``general.architecture`` from a GGUF header, reading only the first keys (cheap)."""
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ConfigError(f"model.path: {path} is neither a GGUF file nor a Hugging Face directory")
        handle.read(4 + 8 + 8)  # version, tensor count, key count
        for _ in range(8):
            (key_len,) = struct.unpack("<Q", handle.read(8))
            key = handle.read(key_len).decode("utf-8", "replace")
            (value_type,) = struct.unpack("<I", handle.read(4))
            if value_type != GGUF_STRING:
                break
            (value_len,) = struct.unpack("<Q", handle.read(8))
            value = handle.read(value_len).decode("utf-8", "replace")
            if key == "general.architecture":
                return value
    return "llama"


def detect_source(path: str) -> ModelSource:
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        try:
            config = json.loads((Path(path) / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.path: {path} has no readable config.json ({exc})") from None
        architecture = config.get("model_type") or (config.get("architectures") or [""])[0]
        return ModelSource(path=path, kind="hf", architecture=str(architecture))
    if not os.path.isfile(path):
        raise ConfigError(f"model.path: {path} does not exist")
    return ModelSource(path=path, kind="gguf", architecture=gguf_architecture(path))


def load_runtime(config: Config, pm: pluggy.PluginManager) -> ModelRuntime:
    source = detect_source(config.model.path or embedded_model_path())
    runtimes = collect(pm, "register_model_runtimes", "model runtime")
    if source.architecture not in runtimes:
        raise ConfigError(f"model.path: no runtime for architecture {source.architecture!r} "
                          f"(registered: {', '.join(runtimes.names()) or 'none'})")
    log.info("loading %s (%s, %s)", source.path, source.kind, source.architecture)
    cache_dir = str(config.path_in_state("", "models"))
    return runtimes.get(source.architecture)(source, config.model, config.engine, cache_dir)


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

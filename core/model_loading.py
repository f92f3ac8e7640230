"""Choose and load the model runtime for the configured model."""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

import pluggy

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

"""TOML configuration loaded into attrs classes with cattrs.

Every option has a key; a bad file gets a :class:`ConfigError` naming the key and the reason.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Optional

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from kvgate.core.errors import ConfigError


def _default_state_dir() -> str:
    base = os.environ.get("KVGATE_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kvgate"
    )
    return base


class FieldError(ValueError):
    """A validator's complaint about one field, so the error can name its key."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


def _positive(instance, attribute, value):
    if value <= 0:
        raise FieldError(attribute.name, f"must be positive, got {value}")


def _non_negative(instance, attribute, value):
    if value < 0:
        raise FieldError(attribute.name, f"must not be negative, got {value}")


def _one_of(*choices: str):
    def check(instance, attribute, value):
        if value not in choices:
            raise FieldError(attribute.name, f"must be one of {', '.join(choices)}, got {value!r}")

    return check


@attrs.define
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8000, validator=_positive)
    api_key: str = ""
    max_websocket_connections: int = attrs.field(default=16, validator=_positive)
    log_requests: bool = True


@attrs.define
class ModelConfig:
    path: str = ""  # Hugging Face directory or GGUF file; empty = the embedded SmolLM2
    name: str = "smollm2"  # the id served on /v1/models
    aliases: list[str] = attrs.field(factory=list)
    dtype: str = attrs.field(default="bf16", validator=_one_of("bf16", "fp32", "fp16"))
    device: str = "auto"  # auto / cpu / cuda
    dialect: str = ""  # empty = chosen from architecture and template
    dialect_variant: str = ""  # empty = the dialect picks from the template (e.g. chatml_json qwen25 / qwen3)
    chat_format: str = ""  # empty = the model's Jinja template with the dialect
    max_context: int = attrs.field(default=0, validator=_non_negative)  # 0 = the trained context
    allow_context_extension: bool = False  # serve past the trained context (RoPE; quality degrades)
    threads: int = attrs.field(default=0, validator=_non_negative)  # 0 = torch default


@attrs.define
class EngineConfig:
    max_batch: int = attrs.field(default=16, validator=_positive)
    max_queue: int = attrs.field(default=64, validator=_positive)
    prefill_chunk: int = attrs.field(default=512, validator=_positive)
    # a fresh prompt with nothing decoding beside it runs in one forward up to this many tokens
    prefill_alone: int = attrs.field(default=8192, validator=_non_negative)  # 0 = always chunk
    block_size: int = attrs.field(default=16, validator=_positive)
    kv_pool_tokens: int = attrs.field(default=65536, validator=_positive)
    default_max_tokens: int = attrs.field(default=0, validator=_non_negative)  # 0 = to the context end
    speculative_ngram: int = attrs.field(default=0, validator=_non_negative)  # draft length; 0 = off


@attrs.define
class TokenizerCacheConfig:
    enable_l0: bool = True
    enable_l1: bool = True
    l0_max_entries: int = attrs.field(default=10_000, validator=_positive)
    l1_max_bytes: int = attrs.field(default=50 * 1024 * 1024, validator=_positive)


@attrs.define
class CacheConfig:
    enabled: bool = True
    device_bytes: int = attrs.field(default=2 * 1024**3, validator=_non_negative)
    decode_reserve_tokens: int = attrs.field(default=512, validator=_non_negative)
    prefix_rounds: int = attrs.field(default=4, validator=_positive)
    ssd_enabled: bool = True
    ssd_path: str = ""  # empty = <state dir>/ssd
    ssd_bytes: int = attrs.field(default=20 * 1024**3, validator=_non_negative)
    chunk_tokens: int = attrs.field(default=256, validator=_positive)
    almost_hit_min_tokens: int = attrs.field(default=1024, validator=_positive)
    almost_hit_min_ratio: float = 0.9


@attrs.define
class FenceConfig:
    enabled: bool = True
    backend: str = "llguidance"


@attrs.define
class GuardConfig:
    enabled: bool = True
    max_token_repeats: int = attrs.field(default=32, validator=_positive)
    max_pattern_period: int = attrs.field(default=32, validator=_positive)
    min_pattern_repeats: int = attrs.field(default=8, validator=_positive)


@attrs.define
class ResponsesConfig:
    store_path: str = ""  # empty = <state dir>/responses


@attrs.define
class AnthropicConfig:
    normalize_billing_header: bool = True


@attrs.define
class PluginsConfig:
    disabled: list[str] = attrs.field(factory=list)


@attrs.define
class Config:
    state_dir: str = attrs.field(factory=_default_state_dir)
    server: ServerConfig = attrs.field(factory=ServerConfig)
    model: ModelConfig = attrs.field(factory=ModelConfig)
    engine: EngineConfig = attrs.field(factory=EngineConfig)
    tokenizer_cache: TokenizerCacheConfig = attrs.field(factory=TokenizerCacheConfig)
    cache: CacheConfig = attrs.field(factory=CacheConfig)
    fence: FenceConfig = attrs.field(factory=FenceConfig)
    guard: GuardConfig = attrs.field(factory=GuardConfig)
    responses: ResponsesConfig = attrs.field(factory=ResponsesConfig)
    anthropic: AnthropicConfig = attrs.field(factory=AnthropicConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)

    def path_in_state(self, configured: str, default_name: str) -> Path:
        return Path(os.path.expanduser(configured or os.path.join(self.state_dir, default_name)))


_converter = cattrs.Converter(forbid_extra_keys=True)


def _describe(exc: BaseException, path: str = "") -> list[str]:
    """Flatten a cattrs exception group into 'key: reason' lines."""
    lines: list[str] = []
    if isinstance(exc, ForbiddenExtraKeysError):
        for key in sorted(exc.extra_fields):
            lines.append(f"{path}{key}: unknown key")
        return lines
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            note = next((n for n in getattr(sub, "__notes__", []) if hasattr(n, "name")), None)
            sub_path = path
            if note is not None:
                sub_path = f"{path}{note.name}." if isinstance(note.name, str) else f"{path}[{note.name}]."
            lines.extend(_describe(sub, sub_path))
        return lines
    if isinstance(exc, FieldError):
        return [f"{path}{exc.name}: {exc.reason}"]
    key = path.rstrip(".") or "(top level)"
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, (TypeError, ValueError, KeyError)) and "invalid value" not in reason:
        reason = f"invalid value ({reason})"
    lines.append(f"{key}: {reason}")
    return lines


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    try:
        return _converter.structure(data, Config)
    except Exception as exc:  # cattrs raises exception groups
        details = "; ".join(_describe(exc)) or str(exc)
        raise ConfigError(f"{source}: {details}") from None


def load_config(path: Optional[str | os.PathLike] = None, overrides: Optional[dict[str, Any]] = None) -> Config:
    """Load ``path`` (TOML) if given, then apply ``overrides`` ({"section": {"key": value}})."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"{source}: file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML ({exc})") from None
    for section, values in (overrides or {}).items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    return config_from_dict(data, source)


def config_to_dict(config: Config) -> dict[str, Any]:
    return _converter.unstructure(config)

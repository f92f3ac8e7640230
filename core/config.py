"""TOML configuration loaded into attrs classes with cattrs.

Every option has a key; a bad file gets a :class:`ConfigError` naming the key and the reason.
Loading takes two steps: :func:`read_config` structures the core sections (``[plugins] disabled``
is needed to build the plugin manager), then :func:`kvgate.core.config_sections.bind_plugin_sections`
structures the sections plugins declare; :func:`kvgate.core.config_sections.load_config` does both.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Optional

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from kvgate.core.config_fields import FieldError
from kvgate.core.config_fields import non_negative as _non_negative
from kvgate.core.config_fields import one_of as _one_of
from kvgate.core.config_fields import optional_in_range as _optional_in_range
from kvgate.core.config_fields import positive as _positive
from kvgate.core.errors import ConfigError


def _default_state_dir() -> str:
    base = os.environ.get("KVGATE_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kvgate"
    )
    return base


@attrs.define
class ApiKeyConfig:
    """One ``[[server.keys]]`` entry: a key naming a tenant (read by the active tenant policy, see
    :mod:`kvgate.core.tenant_policy`)."""

    tenant: str
    key: str = ""  # the key itself; or read it from key_file, or from the environment variable key_env
    key_file: str = ""
    key_env: str = ""
    admin: bool = False  # an admin key sees every tenant's diagnostics, text included
    shared_namespace: str = ""  # tenants naming the same one share prefix-cache entries (opt-in)


@attrs.define
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = attrs.field(default=8000, validator=_positive)
    api_key: str = ""  # one key for the tenant "default"
    keys: list[ApiKeyConfig] = attrs.field(factory=list)
    max_websocket_connections: int = attrs.field(default=16, validator=_positive)  # open sockets per tenant
    max_websocket_connections_total: int = attrs.field(default=256, validator=_positive)  # of all tenants
    max_websocket_lanes: int = attrs.field(default=8, validator=_positive)  # stream_id lanes running on one socket
    # seconds a socket may sit with no client frame and no running response (0 = never closed)
    websocket_idle_timeout: float = attrs.field(default=3600.0, validator=_non_negative)
    # seconds from a connection's first byte (or the end of its last response) to a whole request head,
    # and from the head to the whole body: a client trickling either is cut off (0 = no limit)
    header_read_timeout: float = attrs.field(default=30.0, validator=_non_negative)
    body_read_timeout: float = attrs.field(default=120.0, validator=_non_negative)
    log_requests: bool = True  # read by the request_log plugin
    max_body_bytes: int = attrs.field(default=32 * 1024 * 1024, validator=_positive)  # POST body / WS frame
    max_json_depth: int = attrs.field(default=128, validator=_positive)  # nesting of arrays and objects
    max_json_items: int = attrs.field(default=500_000, validator=_positive)  # values in one body
    record_path: str = ""  # the request_recorder plugin appends each generation's tokens there (off when empty)


@attrs.define
class ModelConfig:
    path: str = ""  # Hugging Face directory or GGUF file; empty = the embedded SmolLM2
    name: str = "smollm2"  # the id served on /v1/models
    aliases: list[str] = attrs.field(factory=list)
    dtype: str = attrs.field(default="bf16", validator=_one_of("bf16", "fp32", "fp16"))
    # linear weights: dense in dtype ("bf16"), int8 per row or int4 in groups of 32 (CPU, dtype bf16)
    weights: str = attrs.field(default="auto", validator=_one_of("auto", "bf16", "int8", "int4"))
    # a Llama / Qwen2 GGUF kept packed runs each layer as one native call (kvgate.models.llama.native):
    # kvgate's own arithmetic end to end, 1.3-1.8x torch's decode; false: torch's path over int4 parts
    native_layers: bool = True
    device: str = "auto"  # auto / cpu / cuda
    dialect: str = ""  # empty = chosen from architecture and template
    dialect_variant: str = ""  # empty = the dialect picks from the template (e.g. chatml_json qwen25 / qwen3)
    chat_format: str = ""  # empty = the model's Jinja template with the dialect
    max_context: int = attrs.field(default=0, validator=_non_negative)  # 0 = the trained context
    allow_context_extension: bool = False  # serve past the trained context (quality degrades)
    # how a model that declares no rope scaling is extended past its trained context
    context_extension: str = attrs.field(default="yarn", validator=_one_of("yarn", "linear", "none"))
    strict_model_name: bool = False  # false: any requested model name is served (one model); true: 404
    # a request's output cap (its own, else engine.default_max_tokens) is clamped to this; unset: the
    # model's own clamp (the embedded model declares one, other models none); 0: no clamp
    max_output_tokens: Optional[int] = attrs.field(default=None, validator=_optional_in_range(0, 1 << 31))
    threads: int = attrs.field(default=0, validator=_non_negative)  # 0 = torch default
    # where converted weights are kept (a GGUF converted once); empty = <state_dir>/models. Servers
    # with separate state dirs may share one: a conversion is locked and written whole.
    weights_cache_dir: str = ""


@attrs.define
class EngineConfig:
    max_batch: int = attrs.field(default=16, validator=_positive)
    max_queue: int = attrs.field(default=64, validator=_positive)
    prefill_chunk: int = attrs.field(default=512, validator=_positive)
    # a fresh prompt with nothing decoding beside it runs in one forward up to this many tokens
    prefill_alone: int = attrs.field(default=8192, validator=_non_negative)  # 0 = always chunk
    block_size: int = attrs.field(default=16, validator=_positive)
    kv_pool_tokens: int = attrs.field(default=65536, validator=_positive)
    default_max_tokens: int = attrs.field(default=4096, validator=_non_negative)  # 0 = to the context end
    speculative_ngram: int = attrs.field(default=0, validator=_non_negative)  # draft length; 0 = off
    # the registered drafter that drafts (register_drafters; e.g. "mtp": the model's MTP layer,
    # speculative_mtp tokens a step); empty: n-gram when speculative_ngram > 0
    speculative: str = ""
    speculative_mtp: int = attrs.field(default=1, validator=_positive)  # MTP draft length (past 1 it chains)
    # batch- and split-invariant arithmetic: the same output cold, cached, restored or batched
    deterministic: bool = True

    @property
    def invariant_arithmetic(self) -> bool:
        """What the runtime is loaded with: ``deterministic``, or on for any speculative decoding
        (a verifying forward must compute each row as plain decoding would, so that speculation
        never changes greedy output, and only the invariant arithmetic guarantees that)."""
        return self.deterministic or bool(self.speculation_keys)

    @property
    def speculation_keys(self) -> dict[str, Any]:
        """The keys that ask for speculative decoding, with their values (empty: none does)."""
        return {key: value for key, value in (("speculative", self.speculative),
                                              ("speculative_ngram", self.speculative_ngram)) if value}


@attrs.define
class SamplingConfig:
    """What a request that leaves a sampling parameter out gets (unset: the model's
    ``generation_config.json`` value when ``model_defaults``, else the protocols' own default)."""

    temperature: Optional[float] = attrs.field(default=None, validator=_optional_in_range(0, 2))
    top_p: Optional[float] = attrs.field(default=None, validator=_optional_in_range(0, 1))
    top_k: Optional[int] = attrs.field(default=None, validator=_optional_in_range(0, 1 << 31))
    min_p: Optional[float] = attrs.field(default=None, validator=_optional_in_range(0, 1))
    model_defaults: bool = True


@attrs.define
class CacheConfig:
    enabled: bool = True
    device_bytes: int = attrs.field(default=2 * 1024**3, validator=_non_negative)
    decode_reserve_tokens: int = attrs.field(default=512, validator=_non_negative)
    prefix_rounds: int = attrs.field(default=4, validator=_positive)
    ssd_enabled: bool = True
    ssd_path: str = ""  # empty = <state dir>/ssd
    ssd_bytes: int = attrs.field(default=20 * 1024**3, validator=_non_negative)
    # free space the SSD tier leaves on its file system: it evicts past either bound (0 = ssd_bytes only)
    ssd_min_free_bytes: int = attrs.field(default=1024**3, validator=_non_negative)
    ssd_worker_id: str = ""  # this worker's name on a shared ssd_path; empty = unique per process
    chunk_tokens: int = attrs.field(default=256, validator=_positive)
    # a hybrid model's recurrent-state snapshot every this many tokens (a multiple of its chunk
    # size): a cut replays at most this many tokens; chosen by bench/bench_state_stride.py (README)
    state_stride: int = attrs.field(default=4096, validator=_positive)
    almost_hit_min_tokens: int = attrs.field(default=1024, validator=_positive)
    almost_hit_min_ratio: float = 0.9
    # retention hints (cache_control, prompt_cache_retention) pin prefixes within this share of
    # device_bytes; each tenant within pinned_tenant_share of that (0 = an even split among the
    # tenants [[server.keys]] names, or all of it when none are configured)
    pinned_share: float = attrs.field(default=0.5, validator=_optional_in_range(0, 1))
    pinned_tenant_share: float = attrs.field(default=0.0, validator=_optional_in_range(0, 1))
    # usage reports cached tokens rounded down to this many (0 = the cache block size; 1 = exact)
    cached_tokens_granularity: int = attrs.field(default=0, validator=_non_negative)


@attrs.define
class FenceConfig:
    enabled: bool = True
    backend: str = ""  # empty = the one registered grammar backend
    compile_budget_s: float = attrs.field(default=2.0, validator=_positive)  # per request, off the engine thread
    schema_recursion_depth: int = attrs.field(default=5, validator=_positive)  # a recursive $ref unrolls this deep
    max_pattern_chars: int = attrs.field(default=4096, validator=_positive)  # a longer `pattern` is not enforced
    schema_preparer: str = ""  # empty = the one registered schema preparer (none: schemas pass unchanged)


@attrs.define
class PluginsConfig:
    disabled: list[str] = attrs.field(factory=list)


@attrs.define
class Config:
    """The core sections as attributes; a plugin's section through :meth:`section` once bound."""

    state_dir: str = attrs.field(factory=_default_state_dir)
    server: ServerConfig = attrs.field(factory=ServerConfig)
    model: ModelConfig = attrs.field(factory=ModelConfig)
    engine: EngineConfig = attrs.field(factory=EngineConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    cache: CacheConfig = attrs.field(factory=CacheConfig)
    fence: FenceConfig = attrs.field(factory=FenceConfig)
    plugins: PluginsConfig = attrs.field(factory=PluginsConfig)
    # not keys of the file: where it came from, its tables no core section owns (structured by
    # their plugins in :func:`kvgate.core.config_sections.bind_plugin_sections`), and the result
    source: str = attrs.field(default="defaults", init=False, repr=False, eq=False)
    plugin_tables: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False, eq=False)
    _sections: Optional[dict[str, Any]] = attrs.field(default=None, init=False, repr=False, eq=False)
    _bound_to: Any = attrs.field(default=None, init=False, repr=False, eq=False)

    def path_in_state(self, configured: str, default_name: str) -> Path:
        return Path(os.path.expanduser(configured or os.path.join(self.state_dir, default_name)))

    def section(self, name: str) -> Any:
        """The structured settings of the plugin section ``[name]`` (its defaults when the file has none).

        Raises ConfigError before the config is bound to a plugin manager, KeyError for a section
        that no loaded plugin declares.
        """
        if self._sections is None:
            raise ConfigError(f"[{name}]: plugin sections are not bound yet; call "
                              "kvgate.core.config_sections.bind_plugin_sections(config, pm) first")
        try:
            return self._sections[name]
        except KeyError:
            known = ", ".join(sorted(self._sections)) or "none"
            raise KeyError(f"no loaded plugin declares a config section [{name}] (declared: {known})") from None

    def bound_sections(self) -> dict[str, Any]:
        """The plugin sections structured so far (empty before binding)."""
        return dict(self._sections or {})

    def is_bound_to(self, pm: Any) -> bool:
        return self._sections is not None and self._bound_to is pm

    def set_sections(self, sections: dict[str, Any], pm: Any) -> None:
        """Record the plugin sections structured for ``pm`` (see ``bind_plugin_sections``)."""
        self._sections, self._bound_to = dict(sections), pm


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


CORE_SECTIONS = tuple(field.name for field in attrs.fields(Config) if field.init)


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    """Step one: structure the core sections; other top-level tables are kept for their plugins."""
    core = {key: value for key, value in data.items() if key in CORE_SECTIONS}
    try:
        config = _converter.structure(core, Config)
    except Exception as exc:  # cattrs raises exception groups
        details = "; ".join(_describe(exc)) or str(exc)
        raise ConfigError(f"{source}: {details}") from None
    config.source = source
    config.plugin_tables = {key: value for key, value in data.items() if key not in CORE_SECTIONS}
    return config


def structure_section(name: str, data: Any, cls: type) -> tuple[Any, list[str]]:
    """(instance, []) or (None, error lines naming ``name.key``) for one section's table."""
    try:
        return _converter.structure(data, cls), []
    except Exception as exc:
        return None, _describe(exc, f"{name}.") or [f"{name}: {exc}"]


def read_config(path: Optional[str | os.PathLike] = None, overrides: Optional[dict[str, Any]] = None) -> Config:
    """Step one of loading: ``path`` (TOML) if given, then ``overrides`` ({"section": {"key": value}}),
    with the core sections structured and the plugin sections not yet (see
    :func:`kvgate.core.config_sections.load_config`)."""
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
    data = _converter.unstructure(config)
    for name, section in (config._sections or {}).items():
        data[name] = _converter.unstructure(section)
    return data

"""Which dialect (and which of its variants) serves the loaded model, and the chat format around it.

The host names no dialect: ``[model] dialect`` picks one by name, else every registered dialect
scores the model (``Dialect.serves(architecture, chat_template)``) and the best one serves; a tie
at the top is an error that asks for ``[model] dialect``. ``[model] dialect_variant`` picks the
variant, else the chosen dialect does (``Dialect.variant_for``).
"""

from __future__ import annotations

from typing import Any

import pluggy

from kvgate.core.config import Config, ModelConfig
from kvgate.core.dialect import Dialect
from kvgate.core.errors import ConfigError
from kvgate.core.plugins import Registry, collect
from kvgate.core.runtime import ModelRuntime


def dialect_scores(dialects: Registry, architecture: str, chat_template: str) -> dict[str, int]:
    """Every registered dialect's ``serves`` score for this model (0 for a factory that is not a
    Dialect subclass: it is served only when configured by name)."""
    return {name: int(dialects.get(name).serves(architecture, chat_template)) if is_dialect_class(dialects.get(name))
            else 0 for name in dialects.names()}


def is_dialect_class(factory: Any) -> bool:
    return isinstance(factory, type) and issubclass(factory, Dialect)


def choose_dialect_name(model: ModelConfig, dialects: Registry, architecture: str, chat_template: str) -> str:
    """``[model] dialect`` when set, else the dialect that scores this model highest."""
    if model.dialect:
        if model.dialect not in dialects:
            raise ConfigError(f"model.dialect: unknown dialect {model.dialect!r} "
                              f"(registered: {', '.join(dialects.names())})")
        return model.dialect
    scores = dialect_scores(dialects, architecture, chat_template)
    best = max(scores.values(), default=0)
    winners = [name for name, score in scores.items() if score == best]
    if best <= 0:
        raise ConfigError(f"model.dialect: no registered dialect serves architecture {architecture!r} "
                          f"(registered: {', '.join(dialects.names()) or 'none'}); set [model] dialect")
    if len(winners) > 1:
        raise ConfigError(f"model.dialect: dialects {', '.join(winners)} all claim architecture "
                          f"{architecture!r} equally; set [model] dialect")
    return winners[0]


def build_dialect(model: ModelConfig, dialects: Registry, architecture: str, chat_template: str) -> tuple[str, Dialect]:
    """The name and instance of the dialect serving this model, in its configured or chosen variant."""
    name = choose_dialect_name(model, dialects, architecture, chat_template)
    factory = dialects.get(name)
    variant = model.dialect_variant
    if not variant:
        variant = factory.variant_for(architecture, chat_template) if is_dialect_class(factory) else ""
    try:
        return name, factory(variant=variant) if variant else factory()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"model.dialect_variant: dialect {name!r} refuses variant {variant!r} ({exc})") from None


def build_chat_format(config: Config, pm: pluggy.PluginManager, runtime: ModelRuntime) -> tuple[str, Dialect, Any]:
    """``(dialect name, dialect, chat format)`` serving this model.

    A registered chat format (``[model] chat_format``, or for a model without a Jinja template the
    one its dialect names) may bring its own variant of the dialect; that one then parses and
    fences what the format renders.
    """
    dialects = collect(pm, "register_dialects", "dialect")
    template = runtime.chat_template or ""
    name, dialect = build_dialect(config.model, dialects, runtime.info.architecture, template)
    wanted = config.model.chat_format
    if not wanted and not template:
        wanted = dialect.chat_format_without_template()
    wanted = wanted or dialect.chat_format_over_template() or "jinja"  # the model's own template
    if wanted == "jinja" and not template:
        raise ConfigError("model.chat_format: the model has no chat template; choose a chat format")
    formats = collect(pm, "register_chat_formats", "chat format")
    if wanted not in formats:
        raise ConfigError(f"model.chat_format: unknown chat format {wanted!r} "
                          f"(registered: {', '.join(formats.names()) or 'none'})")
    chat_format = formats.get(wanted)(runtime, dialect)
    if wanted == "jinja":
        return name, dialect, chat_format
    dialect = adopt_format_dialect(config.model, dialect, chat_format)
    return dialect.name or name, dialect, chat_format


def adopt_format_dialect(model: ModelConfig, dialect: Dialect, chat_format: Any) -> Dialect:
    """The dialect the chat format renders with; a configured variant it overrides is an error."""
    own = chat_format.dialect
    if own is dialect:
        return dialect
    if model.dialect_variant and own.variant != model.dialect_variant:
        raise ConfigError(f"model.dialect_variant: {model.dialect_variant!r} conflicts with chat format "
                          f"{model.chat_format!r}, which renders variant {own.variant!r}")
    return own

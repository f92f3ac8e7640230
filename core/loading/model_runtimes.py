"""Model runtimes as their plugins declare them, and the choice of the one that loads a model.

A runtime plugin registers a :class:`RuntimeSpec`: the architecture names it loads and its
``load`` function. The host holds no architecture names of its own: it matches the names a
model-format plugin read from the model (a :class:`~kvgate.core.runtime.ModelSource`) against
these declarations. An architecture declared by two runtimes is an error, never a silent choice.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import attrs
import pluggy

from kvgate.core.errors import ConfigError
from kvgate.core.plugins import DuplicateName, Registry, collect
from kvgate.core.runtime import ModelSource

_names = attrs.field(default=(), converter=tuple)


@attrs.frozen
class PreviewInfo:
    architecture: str


@attrs.frozen
class ModelPreview:
    """What dialect and chat-format choice need of a runtime, without its weights: ``info.architecture``,
    ``chat_template`` and ``special_tokens`` (the attributes of a loaded runtime they read)."""

    info: PreviewInfo
    chat_template: Optional[str]
    special_tokens: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class RuntimeSpec:
    """What one model runtime loads, and how.

    ``load(source, model_config, engine_config, cache_dir)`` returns a
    :class:`~kvgate.core.runtime.ModelRuntime`. ``hf_model_types`` and ``hf_architectures`` are
    the ``model_type`` and ``architectures`` class names of a Hugging Face ``config.json``;
    ``gguf_architectures`` the ``general.architecture`` values of a GGUF file;
    ``other_architectures`` the names it loads from sources of any other kind (a format plugin's
    own), by that kind: ``{"my_format": ("my_arch",)}``. ``preview(source)``
    (optional) returns a :class:`ModelPreview` read from the source's config and chat template
    without loading tensors (``kvgate plugins`` uses it).
    """

    load: Callable[..., Any]
    hf_model_types: tuple[str, ...] = _names
    hf_architectures: tuple[str, ...] = _names
    gguf_architectures: tuple[str, ...] = _names
    preview: Optional[Callable[[ModelSource], "ModelPreview"]] = None
    other_architectures: dict[str, tuple[str, ...]] = attrs.field(factory=dict)

    def declared(self) -> dict[str, tuple[str, ...]]:
        """The names this runtime loads, by source kind."""
        own = {"hf": self.hf_model_types + self.hf_architectures, "gguf": self.gguf_architectures}
        return {**{kind: tuple(names) for kind, names in self.other_architectures.items()}, **own}

    def loads(self, source: ModelSource) -> bool:
        if source.kind == "hf":
            classes = set(source.architectures) & set(self.hf_architectures)
            return source.architecture in self.hf_model_types or bool(classes)
        if source.kind == "gguf":
            return source.architecture in self.gguf_architectures
        return source.architecture in self.other_architectures.get(source.kind, ())


def collect_runtimes(pm: pluggy.PluginManager) -> Registry:
    """Runtime name -> :class:`RuntimeSpec`; a non-spec entry or an architecture declared twice is an error."""
    runtimes = collect(pm, "register_model_runtimes", "model runtime")
    claimed: dict[tuple[str, str], str] = {}
    for name in runtimes.names():
        spec = runtimes.get(name)
        if not isinstance(spec, RuntimeSpec):
            raise TypeError(f"model runtime {name!r} (plugin {runtimes.owners[name]!r}) registered "
                            f"{type(spec).__name__}, not a RuntimeSpec")
        for kind, names in spec.declared().items():
            for architecture in names:
                if (kind, architecture) in claimed:
                    raise DuplicateName(f"{kind} architecture {architecture!r} is declared by two model runtimes: "
                                        f"{claimed[kind, architecture]!r} and {name!r}")
                claimed[kind, architecture] = name
    return runtimes


def choose_runtime(runtimes: Registry, source: ModelSource) -> str:
    """The name of the runtime that loads ``source``; a one-line :class:`ConfigError` when none does."""
    chosen = [name for name in runtimes.names() if runtimes.get(name).loads(source)]
    names = ", ".join(repr(n) for n in dict.fromkeys([source.architecture, *source.architectures]) if n)
    if not chosen:
        raise ConfigError(f"model.path: no runtime for {source.kind} architecture {names or '(none given)'} "
                          f"(registered: {describe_declarations(runtimes)})")
    if len(chosen) > 1:
        raise ConfigError(f"model.path: {source.kind} architecture {names} is loaded by several runtimes "
                          f"({', '.join(chosen)}); disable all but one in [plugins] disabled")
    return chosen[0]


def describe_declarations(runtimes: Registry) -> str:
    """One line: each runtime and the architectures it loads, e.g. ``llama [hf: llama, ...; gguf: llama]``."""
    rows = []
    for name in runtimes.names():
        declared = runtimes.get(name).declared().items()
        kinds = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in declared if names)
        rows.append(f"{name} [{kinds}]")
    return ", ".join(rows) or "none"

"""The schema-preparer plugin interface and how a fence finds its preparer.

A preparer is contributed through the ``register_schema_preparers`` hook: ``register(name, build)``
where ``build(backend, fence_config)`` returns a :class:`SchemaPreparer` for that grammar backend.
Before a constrained request's fence compiles, the preparer rewrites the schemas the request
carries into ones the backend compiles. ``[fence] schema_preparer`` picks one when several are
registered. With none registered, schemas reach the backend as the client sent them, and one it
cannot compile is the request's 400.
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

import attrs

from kvgate.core.config import Config, FenceConfig
from kvgate.core.errors import ConfigError
from kvgate.core.fence.backend import GrammarBackend, grammar_backend
from kvgate.core.fence.tokens import TokenizerInfo
from kvgate.core.plugins import Registry, collect
from kvgate.core.types import ChatRequest


class SchemaPreparer(Protocol):
    """What ``register_schema_preparers`` builds: client schemas made servable by one backend.
    Called from several fence workers at once."""

    def check_limits(self, request: ChatRequest) -> None:
        """Raise FenceRequestError (a 400) when a schema ``request`` carries is too large to prepare
        at all. Called before the request's build queues, so it must be cheap (no compile)."""

    def prepare_request(self, request: ChatRequest) -> tuple[ChatRequest, list[str]]:
        """``(request, relaxations)``: ``request`` with every schema it carries (tool parameters, a
        ``json_schema`` response format) rewritten for the backend, and one line per relaxation
        made ("<where>: <keyword> at <path> ..."), which the response lists. Raises
        FenceRequestError (a 400) for a schema it refuses; may call
        :func:`kvgate.core.fence.cancel.checkpoint` between costly steps."""


SchemaPreparerBuild = Callable[[GrammarBackend, FenceConfig], SchemaPreparer]


def schema_preparer(pm, config: Config, info: TokenizerInfo) -> Optional[SchemaPreparer]:
    """The preparer for ``config``'s backend and ``[fence]`` settings, built once per tokenizer
    (with its caches), or None when none is registered."""
    key = (pm, attrs.astuple(config.fence))
    with info.lock:
        if key in info.backends.schema_preparers:
            return info.backends.schema_preparers[key]
    registry = collect(pm, "register_schema_preparers", "schema preparer")
    name = chosen_preparer(registry, config.fence.schema_preparer)
    preparer = None
    if name:
        build: SchemaPreparerBuild = registry.get(name)
        preparer = build(grammar_backend(pm, config.fence.backend, info), config.fence)
    with info.lock:
        return info.backends.schema_preparers.setdefault(key, preparer)


def chosen_preparer(registry: Registry, name: str) -> str:
    """The preparer ``name`` (``[fence] schema_preparer``) picks: itself, the one registered when it
    is empty, "" when none is registered; a ConfigError otherwise."""
    names = registry.names()
    if name in registry:
        return name
    if not name and len(names) <= 1:
        return names[0] if names else ""
    wanted = f"named {name!r}" if name else "chosen: set it to one of them"
    raise ConfigError(f"[fence] schema_preparer: no schema preparer {wanted} (registered: "
                      f"{', '.join(names) or 'none'})")


def check_schema_limits(request: ChatRequest, info: TokenizerInfo, config: Config, pm) -> None:
    """The preparer's cheap size limits on ``request``'s schemas; nothing when the fence is off or
    no preparer is registered."""
    preparer = schema_preparer(pm, config, info) if config.fence.enabled else None
    if preparer is not None:
        preparer.check_limits(request)

"""Anthropic Messages adapter: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Also answers ``HEAD /`` and ``HEAD /api/hello`` (Claude Code's connection probes) with 200,
without an API key.
Every route is served with and without the ``/v1`` prefix; query strings (``?beta=true``) are
ignored. See :mod:`.request` (input), :mod:`.stream` (event order), :mod:`.billing` (the
``x-anthropic-billing-header`` normalisation) and :mod:`.errors` (error shape); its ``[anthropic]``
config section is :class:`.settings.AnthropicConfig`.
"""

from __future__ import annotations

from kvgate.adapters.anthropic.settings import AnthropicConfig
from kvgate.core.hookspecs import hookimpl


@hookimpl
def register_adapters(register):
    from kvgate.adapters.anthropic.routes import build_routes

    register("anthropic", build_routes)


@hookimpl
def register_config_sections(register):
    register("anthropic", AnthropicConfig)

"""The request-check plugin interface: what a request must satisfy before its prompt is rendered.

A check is contributed through ``register_request_checks`` (e.g. ``tool_name_check``, which refuses
tool names the served model cannot carry).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from kvgate.core.dialect import Dialect
from kvgate.core.plugins import collect
from kvgate.core.types import ChatRequest


class RequestCheck(Protocol):
    """Built once per served model; called on worker threads, several requests at once."""

    def check_request(self, request: ChatRequest) -> None:
        """Return for a request the model can serve; else raise
        :class:`kvgate.core.errors.InvalidRequest` (the client's 400, in its protocol's shape)
        naming what is wrong. Called before every prompt is rendered (token counting too)."""


RequestCheckBuild = Callable[[Dialect, Any], RequestCheck]


def build_request_checks(pm, dialect: Dialect, tokenizer: Any) -> list[RequestCheck]:
    """One check of every ``register_request_checks`` plugin, in name order."""
    registry = collect(pm, "register_request_checks", "request check")
    return [registry.get(name)(dialect, tokenizer) for name in registry.names()]

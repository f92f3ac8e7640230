"""What adapters receive: the server context (config, pipeline, services, metrics)."""

from __future__ import annotations

import fnmatch
import hashlib
from pathlib import Path
from typing import Any, Optional

import attrs
import pluggy

from kvgate.core.config import Config
from kvgate.core.errors import ModelNotFound
from kvgate.core.http.tenant_policies import NoAuthentication
from kvgate.core.tenant_policy import TenantPolicy


@attrs.define(eq=False)
class ServerContext:
    """Everything a protocol adapter may use. Adapters never touch KV, tokens or model syntax.

    ``pipeline`` is a :class:`kvgate.core.pipeline.pipeline.Pipeline`:
    ``pipeline.stream(request)`` is an async iterator of canonical events (``Started`` first,
    ``Finished`` last); it raises a :class:`kvgate.core.errors.KvgateError` before the first event
    when the request cannot run (the prompt is tokenized then). Closing the iterator early cancels
    the request.
    """

    config: Config
    pm: pluggy.PluginManager
    pipeline: Any
    metrics: Any
    tokenizer_service: Any
    state_dir: Path
    tenant_policy: TenantPolicy = attrs.field(factory=NoAuthentication)  # who each API key is

    @property
    def model_name(self) -> str:
        return self.config.model.name

    @property
    def served_model_names(self) -> list[str]:
        return [self.config.model.name]

    @property
    def api_key(self) -> TenantPolicy:
        """What ``protocol_router(api_key=...)`` checks: the active tenant policy (it may have
        authentication off)."""
        return self.tenant_policy

    def resolve_model(self, requested: Optional[str]) -> str:
        """The served model for ``requested``: any name (the server has one model), or with
        ``model.strict_model_name`` its own name or an alias pattern, else ModelNotFound."""
        if not requested or requested == self.config.model.name or not self.config.model.strict_model_name:
            return self.config.model.name
        if any(fnmatch.fnmatchcase(requested, pattern) for pattern in self.config.model.aliases):
            return self.config.model.name
        raise ModelNotFound(f"The model '{requested}' does not exist. This server serves '{self.config.model.name}'.",
                            param="model")

    def chat_format_render(self, request) -> str:
        return self.pipeline.render_prompt(request)


def call_id(scope: str, index: int, name: str) -> str:
    """A tool-call id from a hash of the request scope, the call index and the function name."""
    return hashlib.sha256(f"{scope}\x00{index}\x00{name}".encode()).hexdigest()[:24]

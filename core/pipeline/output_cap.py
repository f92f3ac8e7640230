"""The output cap a request runs under: its own cap, else ``[engine] default_max_tokens``, clamped
to the model's output clamp.

The clamp is ``[model] max_output_tokens`` when set (0: none), else the model's own
(``ModelInfo.max_output_tokens``: the embedded model declares one for agents that ask for far more
than it can use, other models none). A reply the clamp cuts ends like any reply that reached its
cap (``length`` / ``max_tokens`` / ``incomplete``), and the Responses object reports the cap applied.
"""

from __future__ import annotations

from typing import Optional

import attrs


@attrs.define(frozen=True)
class OutputCap:
    default_max_tokens: int  # a request without a cap gets this (0: to the context's end)
    clamp: int  # no request runs past this many output tokens (0: no clamp)
    source: str = ""  # where the clamp comes from, for the startup log

    @classmethod
    def build(cls, config, model_clamp: int) -> "OutputCap":
        """From ``config``'s ``[engine]`` and ``[model]`` sections over the model's own clamp."""
        configured = config.model.max_output_tokens
        if configured is None:
            return cls(config.engine.default_max_tokens, model_clamp, "the model's own")
        return cls(config.engine.default_max_tokens, configured, "[model] max_output_tokens")

    def applied(self, requested: Optional[int]) -> int:
        """The cap for a request asking for ``requested`` tokens (None or 0: no cap asked for);
        0 means the context's end. A negative request is returned as is, for the caller to refuse."""
        wanted = requested or self.default_max_tokens
        if wanted == 0:
            return self.clamp
        return self.clamped(wanted) if wanted > 0 else wanted

    def clamped(self, tokens: int) -> int:
        """A budget of ``tokens`` output tokens held to the clamp."""
        return min(tokens, self.clamp) if self.clamp else tokens

    def describe(self) -> str:
        return f"{self.clamp} tokens ({self.source})" if self.clamp else ""

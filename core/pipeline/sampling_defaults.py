"""Server-side sampling defaults: what a request that leaves a parameter out is sampled with.

For each of temperature, top_p, top_k and min_p, in order: the request's own value; ``[sampling]``
in the config; the model's ``generation_config.json`` (when ``[sampling] model_defaults``, as model
vendors publish their recommended settings there); the protocols' own default (temperature 1,
top_p 1, top_k and min_p off). Adapters record the parameters a request left out in
``SamplingParams.unset``; the pipeline applies the defaults before the request reaches the engine.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from kvgate.core.types import SamplingParams

DEFAULTABLE = ("temperature", "top_p", "top_k", "min_p")
RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, 1 << 31), "min_p": (0.0, 1.0)}


def unset_names(body: Mapping[str, Any]) -> frozenset[str]:
    """The defaultable parameters a request body leaves out (absent or null)."""
    return frozenset(name for name in DEFAULTABLE if body.get(name) is None)


def valid_defaults(raw: Mapping[str, Any]) -> dict[str, float]:
    """The usable sampling values of a ``generation_config.json`` (others are ignored)."""
    found: dict[str, float] = {}
    for name, (low, high) in RANGES.items():
        value = raw.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if low <= value <= high:
            found[name] = int(value) if name == "top_k" else float(value)
    return found


@attrs.define(frozen=True)
class SamplingDefaults:
    values: dict[str, float] = attrs.field(factory=dict)

    @classmethod
    def build(cls, config: Any, model_values: Mapping[str, float]) -> "SamplingDefaults":
        """``[sampling]`` over the model's values (when ``config.model_defaults``)."""
        values = dict(valid_defaults(model_values)) if config.model_defaults else {}
        values.update({name: getattr(config, name) for name in DEFAULTABLE if getattr(config, name) is not None})
        return cls(values)

    def apply(self, params: SamplingParams) -> SamplingParams:
        changes = {name: self.values[name] for name in params.unset if name in self.values}
        return attrs.evolve(params, **changes) if changes else params

    def describe(self) -> str:
        return ", ".join(f"{name}={self.values[name]:g}" for name in DEFAULTABLE if name in self.values)

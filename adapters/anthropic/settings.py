"""The ``[anthropic]`` config section, declared by the Anthropic adapter."""

from __future__ import annotations

import attrs


@attrs.define
class AnthropicConfig:
    """``normalize_billing_header``: see :mod:`kvgate.adapters.anthropic.billing` for the modes."""

    normalize_billing_header: bool = True

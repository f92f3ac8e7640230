"""What fences build once per tokenizer and reuse: :class:`FenceCaches`, held by
:class:`kvgate.core.fence.tokens.TokenizerInfo` as ``backends`` and guarded by its lock."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import attrs


@attrs.define
class FenceCaches:
    """One tokenizer's built grammar backends, closers, compiled constraints, mask refiners and
    schema preparers (typed ``Any`` here: their modules import this one)."""

    grammar: dict[str, Any] = attrs.field(factory=dict)
    """Grammar backends by name ("" too: the one registered, when ``[fence] backend`` is empty)."""
    closers: dict[tuple[str, ...], Any] = attrs.field(factory=dict)
    """Closers by the dialect's closing literals."""
    constraints: OrderedDict[str, tuple] = attrs.field(factory=OrderedDict)
    """(dialect, template matcher, shortest call cost) by plan digest, least recently used first."""
    refiners: dict[Any, list] = attrs.field(factory=dict)
    """Mask refiners (``register_mask_refiners``) by plugin manager."""
    schema_preparers: dict[tuple, Any] = attrs.field(factory=dict)
    """Schema preparers (None: none registered) by plugin manager, backend and ``[fence]`` settings."""

    def __contains__(self, name: str) -> bool:
        """Whether the grammar backend ``name`` is built."""
        return name in self.grammar

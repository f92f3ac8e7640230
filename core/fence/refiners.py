"""The mask-refiner plugin interface, and the refiners one tokenizer's fences use.

A refiner is contributed through ``register_mask_refiners`` (e.g. ``canonical_split``, which keeps
forced text to the tokenizer's own split). It runs after the grammar, budget triggers and guards
decided a fenced position's allowed set, before the budget's closing invariant.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np
import torch

from kvgate.core.fence.tokens import TokenizerInfo
from kvgate.core.plugins import collect


class MaskRefiner(Protocol):
    """Built once per tokenizer and plugin manager; shared by every request's fence and called on
    the engine thread (several fences in turn, never two at once)."""

    def refine(self, logits: torch.Tensor, mask: np.ndarray, matcher: Any, recent: tuple[int, ...]) -> np.ndarray:
        """The allowed set after this refiner: ``mask`` (bools over the vocabulary) or a copy with
        tokens removed, at least one kept. It may move a removed token's logit onto a kept token
        (``logits``, the row being sampled, in place). ``matcher`` is the request's grammar
        matcher, to try tokens on a ``copy()`` of, never to advance; ``recent`` the last output
        tokens."""


MaskRefinerBuild = Callable[[TokenizerInfo], MaskRefiner]


def mask_refiners(pm, info: TokenizerInfo) -> list[MaskRefiner]:
    """The refiners of ``pm`` for ``info``'s tokenizer, in name order (built at the first call)."""
    with info.lock:
        found = info.backends.refiners.get(pm)
    if found is None:
        registry = collect(pm, "register_mask_refiners", "mask refiner")
        built = [registry.get(name)(info) for name in registry.names()]
        with info.lock:
            found = info.backends.refiners.setdefault(pm, built)
    return found

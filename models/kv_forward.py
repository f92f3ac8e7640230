"""KVForward: what :class:`kvgate.models.kv_runtime.KVRuntime` calls on a family's forward."""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Union

import torch

Context = Union[torch.Tensor, slice]  # slot indices to gather, or a range of consecutive slots


class Rotary(Protocol):
    def ensure(self, positions: int) -> None:
        """Make the rotary tables cover positions [0, positions)."""


class KVForward(Protocol):
    rotary: Rotary
    # the names of the forward's own kernels that shape its state's bits ("/rmsnorm-rows1", the native
    # layer's), "" where torch computes all of it: part of the state's fingerprint
    arithmetic: str

    def prefill(self, tokens: torch.Tensor, start: int, new_slots: torch.Tensor, context: Optional[Context],
                all_logits: bool, interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Logits of ``tokens`` at positions [start, start+n), every row's when ``all_logits`` else the
        last one's; their K/V are written to ``new_slots``, ``context`` holds the slots of [0, start+n)
        (None for a fresh prefill). ``interrupted`` is polled between layers; once it returns True the
        forward raises :class:`kvgate.core.runtime.PrefillInterrupted`."""

    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, new_slots: torch.Tensor, context: Context,
               mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Logits [batch, vocab] of one token per row at ``positions``. ``context``: slots [batch, keys]
        (new token included) or, for a single row, the slot range of its context; ``mask``
        [batch, 1, 1, keys] hides padding keys (None: none to hide)."""


class HiddenKeeping(Protocol):
    """A forward an MTP head drafts from (the Llama forward, DeepSeek V4's)."""

    # set when a head is attached: every pass then keeps the hidden states the head takes
    keep_hidden: bool

    def take_hidden(self) -> torch.Tensor:
        """The hidden states kept by the last pass (with :attr:`keep_hidden`), handed over once."""

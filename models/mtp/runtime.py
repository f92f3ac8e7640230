"""A Llama-family runtime with an MTP draft head (GLM-4.5).

Once a head is attached (:meth:`MtpRuntime.attach_mtp`, when ``[engine] speculative = "mtp"``), the
forward keeps the final hidden states of each pass and the head takes them after every prefill and
decode; forks and truncations carry its per-session state along. Without a head this is the plain
Llama runtime. The main model's state, chunks and fingerprint are the same either way.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from kvgate.core.runtime import DraftHead, Session
from kvgate.models.llama.forward import LlamaForward
from kvgate.models.mtp.head import MtpHead
from kvgate.models.mtp.weights import MtpWeights


class HiddenForward(LlamaForward):
    """The Llama forward that, when ``keep_hidden``, keeps the output head's input of every row."""

    keep_hidden = False
    hidden: Optional[torch.Tensor] = None

    def _head(self, x: torch.Tensor, all_rows: bool = True) -> torch.Tensor:
        if not self.keep_hidden:
            return super()._head(x, all_rows)
        self.hidden = self._norm(x, self.weights.norm)
        rows = self.hidden if all_rows else self.hidden[-1:]
        return self._linear(rows, self.weights.lm_head).float()

    def take_hidden(self) -> torch.Tensor:
        hidden, self.hidden = self.hidden, None
        return hidden


class MtpRuntime:
    """Mixin before :class:`kvgate.models.llama.runtime.LlamaRuntime` (whose ``FORWARD`` it sets)."""

    FORWARD = HiddenForward
    mtp: Optional[MtpHead] = None

    def attach_mtp(self, weights: MtpWeights) -> None:
        self.mtp = MtpHead(self.forward, weights)
        self.forward.keep_hidden = True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        start = session.length
        logits = super().prefill(session, tokens, all_logits, interrupted)
        if self.mtp is not None:
            self.mtp.advance(session, start, self.forward.take_hidden())
        return logits

    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        logits = super().decode(sessions, tokens)
        if self.mtp is not None:
            hidden = self.forward.take_hidden()
            for row, session in enumerate(sessions):
                self.mtp.advance(session, session.length - 1, hidden[row: row + 1])
        return logits

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        child = super().fork(session, length)
        if self.mtp is not None:
            self.mtp.fork(session, child)
        return child

    def truncate(self, session: Session, length: int) -> None:
        super().truncate(session, length)
        if self.mtp is not None:
            self.mtp.truncate(session)

"""The DeepSeek V4 runtime's prefill and decode: segments through :class:`~.forward.DeepseekV4Forward`,
with the session's entries and raw tails restored when a prefill is interrupted between layers."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from kvgate.core.runtime import PrefillInterrupted, Session
from kvgate.models.deepseek_v4 import state, tail
from kvgate.models.deepseek_v4.forward import Segment


class ForwardPasses:
    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        ids = self._claim_prefill(session, tokens)
        tails = dict(tail.tails(session))  # the layers already run have moved theirs on
        try:
            logits = self.forward.run([Segment(session, session.length, len(tokens))], ids, all_logits, interrupted)
        except PrefillInterrupted:
            self._trim(session)
            state.keep_entries(session, session.length, self.rates)
            session.aux[tail.TAILS] = tails
            raise
        start = session.length
        session.tokens.extend(int(t) for t in tokens)
        if self.mtp is not None:
            self.mtp.advance(session, start, self.forward.take_hidden())
        return logits if all_logits else logits[0]

    @torch.inference_mode()
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        ids = self._claim_decode(sessions, tokens)
        logits = self.forward.run([Segment(s, s.length, 1) for s in sessions], ids, True)
        for session, token in zip(sessions, tokens):
            session.tokens.append(int(token))
        if self.mtp is not None:
            hidden = self.forward.take_hidden()
            for row, session in enumerate(sessions):
                self.mtp.advance(session, session.length - 1, hidden[row:row + 1])
        return logits

"""DeepseekV4Runtime: the Llama runtime's block tables and chunk framing over V4's per-token rows.

Exported state: the raw bytes of ``[1, 1, tokens, 1, width]`` in the runtime dtype -- each token's
row of :class:`~kvgate.models.deepseek_v4.state.TokenLayout` (per layer its K=V vector, and in a
compressed layer its compressor's and indexer's raw projections) -- in the Llama chunk framing, with
no auxiliary bytes: the compressed entries are rebuilt from the rows, so a session restored chunk
by chunk, forked or truncated at any token holds exactly what a prefill of its tokens gives.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from kvgate.core.runtime import DraftHead, PrefillInterrupted, Session, check_decode_batch
from kvgate.models.deepseek_v4 import state
from kvgate.models.deepseek_v4.arch import ARCHITECTURES, DeepseekV4Arch
from kvgate.models.deepseek_v4.draft import V4DraftHead
from kvgate.models.deepseek_v4.draft_weights import DraftWeights, draft_weights_from_hf
from kvgate.models.deepseek_v4.forward import DeepseekV4Forward, Segment
from kvgate.models.deepseek_v4.checkpoint import read_weights
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime


class DeepseekV4Runtime(LlamaRuntime):
    STATE_NAME = "deepseek-v4-rows/1"
    mtp: Optional[V4DraftHead] = None

    def attach_mtp(self, weights: DraftWeights) -> None:
        """Draft with the checkpoint's MTP layer (``[engine] speculative = "mtp"``)."""
        self.mtp = V4DraftHead(self.forward, weights, self.arch)
        self.forward.keep_hidden = True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    def new_pool(self, kv_pool_tokens: int) -> KVPool:
        self.layout = state.TokenLayout(self.arch)
        self.rates = {i: self.arch.rate(i) for i in range(self.arch.layers) if self.arch.rate(i)}
        return KVPool(1, 1, self.layout.width, self.block_size, kv_pool_tokens, self.dtype, self.device, parts=1)

    def new_forward(self) -> DeepseekV4Forward:
        return DeepseekV4Forward(self.arch, self.weights, self.pool, self.layout)

    @property
    def state_format(self) -> str:
        arch, dtype = self.arch, str(self.dtype).removeprefix("torch.")
        kinds = "".join(kind[0] for kind in arch.kinds)
        return (f"{self.STATE_NAME} {dtype} {kinds} ({self.layout.describe()}) window{arch.window} "
                f"rates{arch.csa_rate}/{arch.hca_rate}")

    # --- sessions -------------------------------------------------------------------------------
    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        fork = super().fork(session, length)
        fork.aux[state.ENTRIES] = state.forked_entries(session, fork.length, self.rates)
        if self.mtp is not None:
            self.mtp.fork(session, fork)
        return fork

    def truncate(self, session: Session, length: int) -> None:
        super().truncate(session, length)
        state.keep_entries(session, length, self.rates)
        if self.mtp is not None:
            self.mtp.truncate(session)

    def release(self, session: Session) -> None:
        super().release(session)
        state.release_entries(session)
        session.aux.clear()

    def session_bytes(self, session: Session) -> int:
        """The session's blocks plus its cached compressed entries (and the MTP layer's state)."""
        draft = self.mtp.state_bytes(session) if self.mtp is not None else 0
        return super().session_bytes(session) + state.entry_bytes(session) + draft

    # --- forward passes -------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        if len(tokens) == 0:
            raise ValueError("prefill needs at least one token")
        ids = self._token_tensor(tokens)
        self._check_room(session, len(tokens))
        self._reserve([session], len(tokens))
        try:
            logits = self.forward.run([Segment(session, session.length, len(tokens))], ids, all_logits, interrupted)
        except PrefillInterrupted:
            self._trim(session)
            state.keep_entries(session, session.length, self.rates)
            raise
        start = session.length
        session.tokens.extend(int(t) for t in tokens)
        if self.mtp is not None:
            self.mtp.advance(session, start, self.forward.take_hidden())
        return logits if all_logits else logits[0]

    @torch.inference_mode()
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        check_decode_batch(sessions, tokens)
        ids = self._token_tensor(tokens)
        for session in sessions:
            self._check_room(session, 1)
        self._reserve(sessions, 1)
        logits = self.forward.run([Segment(s, s.length, 1) for s in sessions], ids, True)
        for session, token in zip(sessions, tokens):
            session.tokens.append(int(token))
        if self.mtp is not None:
            hidden = self.forward.take_hidden()
            for row, session in enumerate(sessions):
                self.mtp.advance(session, session.length - 1, hidden[row:row + 1])
        return logits


DEEPSEEK_V4 = Family("DeepSeek V4", set(ARCHITECTURES), DeepseekV4Arch.from_hf_config, DeepseekV4Runtime,
                     read_weights, draft_weights_from_hf)

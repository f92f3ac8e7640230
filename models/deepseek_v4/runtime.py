"""DeepseekV4Runtime: the Llama runtime's block tables and chunk framing over V4's session state.

A session (:mod:`.state`) holds per token its K=V row in the pool (``layers * head_dim``), per
window the compressed entries, and per compressed layer a bounded raw tail (:mod:`.tail`); forks
and truncations share or cut all three at any token, replaying at most
``max(hca_rate, 2 * csa_rate) - 1`` tokens when the tail they need is gone (:mod:`.replay`).

Exported state, in the Llama chunk framing: the KV bytes of a chunk ``[start, end)`` are its
tokens' K=V rows, ``[tokens, layers * head_dim]`` in the runtime dtype; its aux bytes the entries of
the windows completing within ``(start, end]`` and the raw tails at ``end`` (:mod:`.chunks`).
"""

from __future__ import annotations

from typing import Optional

import torch

from kvgate.core.runtime import DraftHead, Session
from kvgate.models.deepseek_v4 import chunks, state, tail
from kvgate.models.deepseek_v4.arch import ARCHITECTURES, DeepseekV4Arch
from kvgate.models.deepseek_v4.draft import V4DraftHead
from kvgate.models.deepseek_v4.draft_weights import DraftWeights, draft_weights_from_hf
from kvgate.models.deepseek_v4.forward import DeepseekV4Forward
from kvgate.models.deepseek_v4.checkpoint import read_weights
from kvgate.models.deepseek_v4.passes import ForwardPasses
from kvgate.models.deepseek_v4.replay import replay
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.loading import Family
from kvgate.models.llama.runtime import LlamaRuntime


class DeepseekV4Runtime(ForwardPasses, LlamaRuntime):
    STATE_NAME = "deepseek-v4-state/2"
    mtp: Optional[V4DraftHead] = None
    replays = replayed_tokens = 0  # cuts that ran tokens again, and how many tokens in all

    def invariant_arithmetic(self) -> bool:
        """Projections, hyper-connections, experts, compressors, the indexer and attention run with
        :class:`~.arithmetic.Arithmetic`'s invariant ops in the deterministic mode."""
        return True

    def attach_mtp(self, weights: DraftWeights) -> None:
        """Draft with the checkpoint's MTP layer (``[engine] speculative = "mtp"``)."""
        self.mtp = V4DraftHead(self.forward, weights, self.arch)
        self.forward.keep_hidden = True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    def new_pool(self, kv_pool_tokens: int) -> KVPool:
        self.layout = state.TokenLayout(self.arch)
        self.raw_layout = tail.RawLayout(self.arch, spare=self.arch.csa_rate)
        self.rates = {i: self.arch.rate(i) for i in range(self.arch.layers) if self.arch.rate(i)}
        return KVPool(1, 1, self.layout.width, self.block_size, kv_pool_tokens, self.dtype, self.device, parts=1)

    def new_forward(self) -> DeepseekV4Forward:
        return DeepseekV4Forward(self.arch, self.weights, self.pool, self.layout, self.raw_layout, self.deterministic)

    @property
    def state_format(self) -> str:
        arch, dtype = self.arch, str(self.dtype).removeprefix("torch.")
        kinds = "".join(kind[0] for kind in arch.kinds)
        return (f"{self.STATE_NAME} {dtype} {kinds} kv{arch.head_dim} index{arch.index_dim} window{arch.window} "
                f"rates{arch.csa_rate}/{arch.hca_rate}")

    # --- sessions -------------------------------------------------------------------------------
    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        fork = super().fork(session, length)
        fork.aux[state.ENTRIES] = state.forked_entries(session, fork.length, self.rates)
        self._cut_tails(session, fork)
        if self.mtp is not None:
            self.mtp.fork(session, fork)
        return fork

    def truncate(self, session: Session, length: int) -> None:
        super().truncate(session, length)
        state.keep_entries(session, length, self.rates)
        self._cut_tails(session, session)
        if self.mtp is not None:
            self.mtp.truncate(session)

    def _cut_tails(self, source: Session, target: Session) -> None:
        """``target``'s raw tails at its length: ``source``'s cut, or replayed when those are gone."""
        if tail.covers(source, self.raw_layout, target.length):
            target.aux[tail.TAILS] = tail.cut_tails(source, target.length)
            return
        count = replay(self.forward, self.raw_layout, target)
        self.replays, self.replayed_tokens = self.replays + 1, self.replayed_tokens + count

    def release(self, session: Session) -> None:
        super().release(session)
        state.release_entries(session)
        session.aux.clear()

    def session_bytes(self, session: Session) -> int:
        """The session's blocks, entry buffers and raw tails (and the MTP layer's state)."""
        draft = self.mtp.state_bytes(session) if self.mtp is not None else 0
        return super().session_bytes(session) + state.entry_bytes(session) + tail.tail_bytes(session) + draft

    # --- state as bytes -------------------------------------------------------------------------
    def state_bytes(self, length: int) -> int:
        """The bytes of one chunk's body holding tokens [0, length): K=V rows, entries, tails."""
        return length * self.pool.bytes_per_token + chunks.aux_bytes(self.raw_layout, 0, length,
                                                                     self.pool.storage.element_size())

    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        kv = self.export_state(session, start, end)
        aux = chunks.encode(session, self.raw_layout, start, end, self._tails_at(session, end))
        return self.framed_chunk(kv, aux)

    def _tails_at(self, session: Session, end: int) -> dict:
        if tail.covers(session, self.raw_layout, end):
            return tail.tails(session)
        shorter = self.fork(session, end)  # replays: the session's own tails have moved past ``end``
        held = dict(tail.tails(shorter))
        self.release(shorter)
        return held

    @torch.inference_mode()
    def import_chunk(self, session: Session, tokens, data: bytes) -> None:
        kv, aux = self.chunk_parts(data)
        start, end = session.length, session.length + len(tokens)
        arrays = chunks.decode(aux, self.raw_layout, start, end, self.dtype)
        chunks.check_entries(session, self.raw_layout, start)
        self.import_state(session, tokens, kv)
        chunks.install(session, self.raw_layout, arrays, end, self.device)


DEEPSEEK_V4 = Family("DeepSeek V4", set(ARCHITECTURES), DeepseekV4Arch.from_hf_config, DeepseekV4Runtime,
                     read_weights, draft_weights_from_hf)

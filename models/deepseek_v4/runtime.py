"""DeepseekV4Runtime: V4's session state over a :class:`PagedKV` of each token's K=V row.

A session (:mod:`.state`) holds per token its K=V row in the pool (``layers * head_dim``), per
window the compressed entries, and per compressed layer a bounded raw tail (:mod:`.tail`); forks
and truncations share or cut all three at any token, replaying at most
``max(hca_rate, 2 * csa_rate) - 1`` tokens when the tail they need is gone (:mod:`.replay`).

Exported state, in the chunk framing of :mod:`kvgate.models.chunk_frames`: the per-token bytes of a
chunk ``[start, end)`` are its tokens' K=V rows, ``[tokens, layers * head_dim]`` in the runtime
dtype; its aux bytes the entries of the windows completing within ``(start, end]`` and the raw tails
at ``end`` (:mod:`.chunks`).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from kvgate.core.runtime import DraftHead, ModelInfo, ModelRuntime, PrefillInterrupted, Session
from kvgate.models import chunk_frames
from kvgate.models.deepseek_v4 import chunks, state, tail
from kvgate.models.deepseek_v4.arch import ARCHITECTURES, DeepseekV4Arch
from kvgate.models.deepseek_v4.draft import V4DraftHead
from kvgate.models.deepseek_v4.draft_weights import DraftWeights, draft_weights_from_hf
from kvgate.models.deepseek_v4.forward import DeepseekV4Forward, Segment
from kvgate.models.deepseek_v4.checkpoint import read_weights
from kvgate.models.deepseek_v4.replay import replay
from kvgate.models.deepseek_v4.weights import DeepseekV4Weights
from kvgate.models.fingerprint import runtime_fingerprint
from kvgate.models.kv_pool import KVPool
from kvgate.models.mtp.head import advance_decoded
from kvgate.models.loading import Family
from kvgate.models.paged_kv import PagedKV


class DeepseekV4Runtime(ModelRuntime):
    STATE_NAME = "deepseek-v4-state/2"
    CHUNK_HEADER_BYTES = chunk_frames.CHUNK_HEADER_BYTES

    def __init__(self, arch: DeepseekV4Arch, weights: DeepseekV4Weights, info: ModelInfo, tokenizer,
                 chat_template: Optional[str], special_tokens: dict[str, str], block_size: int = 16,
                 kv_pool_tokens: int = 65536, deterministic: bool = False):
        self.arch, self.weights, self.info, self.deterministic = arch, weights, info, deterministic
        self.tokenizer, self.chat_template, self.special_tokens = tokenizer, chat_template, special_tokens
        self.block_size, self.device, self.dtype = block_size, weights.embed.device, weights.embed.dtype
        self.layout = state.TokenLayout(arch)
        self.raw_layout = tail.RawLayout(arch, spare=arch.csa_rate)
        self.rates = {i: arch.rate(i) for i in range(arch.layers) if arch.rate(i)}
        self.pool = KVPool(1, 1, self.layout.width, block_size, kv_pool_tokens, self.dtype, self.device, parts=1)
        self.paged = PagedKV(self.pool, block_size, arch.vocab_size, info.max_context)
        self.forward = DeepseekV4Forward(arch, weights, self.pool, self.layout, self.raw_layout, deterministic)
        self.mtp: Optional[V4DraftHead] = None
        self.replays = self.replayed_tokens = 0  # cuts that ran tokens again, and how many tokens in all
        self._fingerprint: Optional[str] = None

    def invariant_arithmetic(self) -> bool:
        """Projections, hyper-connections, experts, compressors, the indexer and attention run with
        :class:`~.arithmetic.Arithmetic`'s invariant ops in the deterministic mode."""
        return True

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = runtime_fingerprint(self.arch, self.weights, self.dtype, self.deterministic, "")
        return self._fingerprint

    def attach_mtp(self, weights: DraftWeights) -> None:
        """Draft with the checkpoint's MTP layer (``[engine] speculative = "mtp"``)."""
        self.mtp = V4DraftHead(self.forward, weights, self.arch)
        self.forward.keep_hidden = True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    @property
    def state_format(self) -> str:
        arch, dtype = self.arch, str(self.dtype).removeprefix("torch.")
        kinds = "".join(kind[0] for kind in arch.kinds)
        return (f"{self.STATE_NAME} {dtype} {kinds} kv{arch.head_dim} index{arch.index_dim} window{arch.window} "
                f"rates{arch.csa_rate}/{arch.hca_rate}")

    # --- sessions -------------------------------------------------------------------------------
    def new_session(self) -> Session:
        return self.paged.new_session()

    def pool_stats(self) -> dict[str, int]:
        return self.pool.stats()

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        fork = self.paged.fork(session, length)
        fork.aux[state.ENTRIES] = state.forked_entries(session, fork.length, self.rates)
        self._cut_tails(session, fork)
        if self.mtp is not None:
            self.mtp.fork(session, fork)
        return fork

    def truncate(self, session: Session, length: int) -> None:
        self.paged.truncate(session, length)
        state.keep_entries(session, length, self.rates)
        self._cut_tails(session, session)
        if self.mtp is not None:
            self.mtp.truncate(session)

    def cut_replay_tokens(self, session: Session, length: int) -> int:
        """0 while the session's tails cover ``length``, else the tokens :func:`.replay` runs again."""
        if tail.covers(session, self.raw_layout, length):
            return 0
        return length - self.raw_layout.replay_start(length)

    def aux_state_bytes(self, sessions: Sequence[Session]) -> int:
        """Entry buffers (shared ones once), raw tails and the MTP layer's state."""
        buffers = {id(v.buffer): v.buffer.data for s in sessions for v in state.cached_entries(s).values()}
        draft = sum(self.mtp.state_bytes(s) for s in sessions) if self.mtp is not None else 0
        return sum(t.numel() * t.element_size() for t in buffers.values()) + sum(map(tail.tail_bytes, sessions)) + draft

    def _cut_tails(self, source: Session, target: Session) -> None:
        """``target``'s raw tails at its length: ``source``'s cut, or replayed when those are gone."""
        if tail.covers(source, self.raw_layout, target.length):
            target.aux[tail.TAILS] = tail.cut_tails(source, target.length)
            return
        count = replay(self.forward, self.raw_layout, target)
        self.replays, self.replayed_tokens = self.replays + 1, self.replayed_tokens + count

    def release(self, session: Session) -> None:
        self.paged.release(session)
        state.release_entries(session)
        session.aux.clear()

    def session_bytes(self, session: Session) -> int:
        """The session's blocks, entry buffers and raw tails (and the MTP layer's state)."""
        draft = self.mtp.state_bytes(session) if self.mtp is not None else 0
        return self.paged.session_bytes(session) + state.entry_bytes(session) + tail.tail_bytes(session) + draft

    # --- forward passes -------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Segments through the forward; an interrupted prefill leaves the session's entries and raw
        tails as they were (the layers already run have moved theirs on)."""
        ids = self.paged.claim_prefill(session, tokens)
        tails = dict(tail.tails(session))
        try:
            logits = self.forward.run([Segment(session, session.length, len(tokens))], ids, all_logits, interrupted)
        except PrefillInterrupted:
            self.paged.trim(session)
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
        ids = self.paged.claim_decode(sessions, tokens)
        logits = self.forward.run([Segment(s, s.length, 1) for s in sessions], ids, True)
        for session, token in zip(sessions, tokens):
            session.tokens.append(int(token))
        if self.mtp is not None:
            advance_decoded(self.mtp, self.forward.take_hidden(), sessions)
        return logits

    # --- state as bytes -------------------------------------------------------------------------
    def state_bytes(self, length: int) -> int:
        """The bytes of one chunk's body holding tokens [0, length): K=V rows, entries, tails."""
        return length * self.pool.bytes_per_token + chunks.aux_bytes(self.raw_layout, 0, length,
                                                                     self.pool.storage.element_size())

    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        kv = self.export_state(session, start, end)
        aux = chunks.encode(session, self.raw_layout, start, end, self._tails_at(session, end))
        return chunk_frames.framed_chunk(kv, aux)

    def _tails_at(self, session: Session, end: int) -> dict:
        if tail.covers(session, self.raw_layout, end):
            return tail.tails(session)
        shorter = self.fork(session, end)  # replays: the session's own tails have moved past ``end``
        held = dict(tail.tails(shorter))
        self.release(shorter)
        return held

    @torch.inference_mode()
    def import_chunk(self, session: Session, tokens, data: bytes) -> None:
        kv, aux = chunk_frames.chunk_parts(data)
        start, end = session.length, session.length + len(tokens)
        arrays = chunks.decode(aux, self.raw_layout, start, end, self.dtype)
        chunks.check_entries(session, self.raw_layout, start)
        chunk_frames.import_rows(self.paged, session, tokens, kv)
        chunks.install(session, self.raw_layout, arrays, end, self.device)


    def export_state(self, session: Session, start: int = 0, end: Optional[int] = None) -> bytes:
        """The K=V rows of tokens [start, end) (the per-token part of :meth:`export_chunk`)."""
        return chunk_frames.export_rows(self.paged, session, start, end)


DEEPSEEK_V4 = Family("DeepSeek V4", set(ARCHITECTURES), DeepseekV4Arch.from_hf_config, DeepseekV4Runtime,
                     read_weights, draft_weights_from_hf)

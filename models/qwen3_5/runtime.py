"""Qwen35Runtime: a hybrid session over a :class:`PagedKV` of the full-attention layers' K/V.

Per token, the pool holds the full-attention layers' K/V (``[full layers, 2, tokens, kv_heads,
head_dim]``, the Llama layout over those layers only). Per session, ``session.aux`` holds every
linear layer's state at the session's length and snapshots of it at chosen positions
(:mod:`.linear_state`): the start and the end of each prefill (a prompt; a speculative step's
drafts), the end of a fork's source (an output the cache takes), every
:attr:`Qwen35Runtime.state_stride` tokens, and the message ends and pinned marks the host names
(:meth:`Qwen35Runtime.mark_boundaries`, taken inside the prefill that passes them). The
snapshots stay inside the runtime, behind the host's existing contract (as DeepSeek V4's raw
tails do): a fork, a truncation or an export at a position restores the nearest snapshot at or
before it and replays the tokens in between (a forward that writes no K/V);
:attr:`replayed_tokens` counts them, and the host asks ahead how many a cut would run
(:meth:`cut_replay_tokens`). ``[cache] state_stride`` sets the stride (:meth:`set_state_stride`).
With ``[engine] speculative = "mtp"`` the checkpoint's MTP layer drafts (:mod:`.mtp_layer`), fed
the forward's final hidden states after every pass.

A chunk ``[start, end)`` (:mod:`kvgate.models.chunk_frames`): its per-token bytes the tokens'
full-attention K/V, its aux bytes the linear layers' state at ``end`` (:mod:`.state_chunks`).
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence

import torch

from kvgate.core.runtime import DraftHead, ModelInfo, ModelRuntime, PrefillInterrupted, Session
from kvgate.models import chunk_frames
from kvgate.models.fingerprint import runtime_fingerprint
from kvgate.models.invariant_attention import padded_keys
from kvgate.models.kv_pool import KVPool
from kvgate.models.loading import Family
from kvgate.models.mtp.head import MtpHead, advance_decoded
from kvgate.models.paged_kv import PagedKV
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.qwen3_5 import linear_state, state_chunks
from kvgate.models.qwen3_5.arch import ARCHITECTURES, MOE_ARCHITECTURES, NEXT_ARCHITECTURES, Qwen35Arch
from kvgate.models.qwen3_5.forward import Qwen35Forward
from kvgate.models.qwen3_5.linear_state import LayerState
from kvgate.models.qwen3_5.mtp_layer import Qwen35MtpLayer
from kvgate.models.qwen3_5.mtp_weights import mtp_weights_from_hf
from kvgate.models.qwen3_5.quantize import quantize_weights
from kvgate.models.qwen3_5.weights import Qwen35Weights, read_weights
from kvgate.models.rope import Rotary

log = logging.getLogger("kvgate")
States = tuple[LayerState, ...]


class Qwen35Runtime(ModelRuntime):
    STATE_NAME = "qwen3_5-hybrid/1"
    CHUNK_HEADER_BYTES = chunk_frames.CHUNK_HEADER_BYTES
    # a snapshot every this many tokens of a long prompt or output (a multiple of the chunk size):
    # a cut replays at most this many tokens, and a snapshot costs every linear layer's state
    # (see :mod:`.linear_state`); [cache] state_stride sets it (its default measured: README)
    state_stride = 4096
    mtp: Optional[MtpHead] = None  # the checkpoint's MTP layer with [engine] speculative = "mtp"

    def __init__(self, arch: Qwen35Arch, weights: Qwen35Weights, info: ModelInfo, tokenizer,
                 chat_template: Optional[str], special_tokens: dict[str, str], block_size: int = 16,
                 kv_pool_tokens: int = 65536, deterministic: bool = False):
        self.arch, self.weights, self.info, self.deterministic = arch, weights, info, deterministic
        self.tokenizer, self.chat_template, self.special_tokens = tokenizer, chat_template, special_tokens
        self.block_size, self.device, self.dtype = block_size, weights.embed.device, weights.embed.dtype
        self.pool = KVPool(len(arch.full_layers), arch.kv_heads, arch.head_dim, block_size, kv_pool_tokens,
                           self.dtype, self.device)
        self.paged = PagedKV(self.pool, block_size, arch.vocab_size, info.max_context)
        rotary = Rotary(arch.rotary_dim, arch.rope_theta, arch.rope_scaling, self.dtype, self.device,
                        initial_positions=min(info.max_context, 8192))
        self.forward = Qwen35Forward(arch, weights, self.pool, rotary, fp32_attention_keys(self.device, self.dtype),
                                     deterministic)
        self.replays = self.replayed_tokens = 0
        self._fingerprint: Optional[str] = None

    def attach_mtp(self, weights) -> None:
        """Draft with the checkpoint's MTP layer (``[engine] speculative = "mtp"``)."""
        self.mtp, self.forward.keep_hidden = MtpHead(Qwen35MtpLayer(self.forward, weights)), True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    def invariant_arithmetic(self) -> bool:
        """Aligned delta-rule chunks, invariant attention, padded products and activations, the
        experts of Qwen3.5-MoE and Qwen3-Next included."""
        return True

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = runtime_fingerprint(self.arch, self.weights, self.dtype, self.deterministic, "")
        return self._fingerprint

    @property
    def state_format(self) -> str:
        arch, dtype = self.arch, str(self.dtype).removeprefix("torch.")
        return (f"{self.STATE_NAME} {dtype} kv{len(arch.full_layers)}x{arch.kv_heads}x{arch.head_dim} "
                f"linear{len(arch.linear_layers)}x{arch.linear_v_heads}x{arch.linear_k_dim}x{arch.linear_v_dim} "
                f"conv{arch.conv_kernel}x{arch.conv_dim} chunk{arch.chunk_size}")

    # --- linear state -----------------------------------------------------------------------------
    def _states(self, session: Session) -> States:
        held = linear_state.held(session)
        return held if held is not None else linear_state.initial(self.arch, self.dtype, self.device)

    def _stride_points(self, start: int, end: int) -> list[int]:
        stride = self.state_stride
        if stride <= 0 or stride % self.arch.chunk_size:
            raise ValueError(f"state_stride {stride} must be a positive multiple of the chunk size {self.arch.chunk_size}")
        return list(range((start // stride + 1) * stride, end, stride))

    def set_state_stride(self, stride: int) -> None:
        if stride <= 0 or stride % self.arch.chunk_size:
            raise ValueError(f"cache.state_stride: {stride} is not a positive multiple of the model's "
                             f"delta-rule chunk size {self.arch.chunk_size}")
        self.state_stride = stride

    def cut_replay_tokens(self, session: Session, length: int) -> int:
        """0 at the session's own length, else the distance from the nearest snapshot (as :meth:`_rebuild`)."""
        if length == session.length and linear_state.held(session) is not None:
            return 0
        return length - linear_state.nearest(session, length)[0]

    def mark_boundaries(self, session: Session, positions: Sequence[int]) -> None:
        """Snapshots at message ends the prefill passes (:func:`.linear_state.mark_boundaries`)."""
        linear_state.mark_boundaries(session, positions)

    def aux_state_bytes(self, sessions: Sequence[Session]) -> int:
        return linear_state.sessions_state_bytes(sessions)

    def _settle(self, session: Session, states: States, taken: dict[int, States]) -> None:
        """The session's new states at its length, kept as a snapshot too, with the stride's ones."""
        session.aux[linear_state.STATE] = states
        for position, snapshot in taken.items():
            linear_state.keep_snapshot(session, position, snapshot, self.state_stride)
        linear_state.keep_snapshot(session, session.length, states, self.state_stride)

    def _rebuild(self, target: Session, taken: dict[int, States], held: Optional[States], held_at: int) -> None:
        """``target``'s states at its length from a session's snapshots ``taken`` and its states
        ``held`` at ``held_at``: those, a snapshot, or a snapshot and a replay of the tokens after it
        (``target`` holds their K/V already)."""
        length = target.length
        target.aux[linear_state.SNAPSHOTS] = {p: s for p, s in taken.items() if p <= length}
        if length == held_at and held is not None:
            target.aux[linear_state.STATE] = held
            return
        start, states = linear_state.nearest(target, length)
        states = states if states is not None else linear_state.initial(self.arch, self.dtype, self.device)
        if start < length:
            states = self._replay(target, start, states)
        target.aux[linear_state.STATE] = states

    @torch.inference_mode()
    def _replay(self, session: Session, start: int, states: States) -> States:
        ids = self.paged.token_tensor(session.tokens[start:session.length])
        context = self.paged.context(session, session.length)
        result = self.forward.prefill(ids, start, states, None, context, False)
        self.replays, self.replayed_tokens = self.replays + 1, self.replayed_tokens + ids.shape[0]
        return result.states

    # --- sessions -------------------------------------------------------------------------------
    def new_session(self) -> Session:
        return self.paged.new_session()

    def pool_stats(self) -> dict[str, int]:
        return self.pool.stats()

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        fork = self.paged.fork(session, length)
        if fork.length == session.length and linear_state.held(session) is not None:
            linear_state.keep_snapshot(session, session.length, linear_state.held(session), self.state_stride)
        replayed = self.cut_replay_tokens(session, fork.length)
        self._rebuild(fork, linear_state.snapshots(session), linear_state.held(session), session.length)
        linear_state.inherit_first_boundary(fork, session)
        if replayed:  # the next fork at this point (another conversation on the same system prompt) replays nothing
            linear_state.keep_snapshot(session, fork.length, linear_state.held(fork), self.state_stride)
        if self.mtp is not None:
            self.mtp.fork(session, fork)
        return fork

    def truncate(self, session: Session, length: int) -> None:
        if length == session.length:
            return
        taken, held, held_at = linear_state.snapshots(session), linear_state.held(session), session.length
        self.paged.truncate(session, length)
        self._rebuild(session, taken, held, held_at)
        if self.mtp is not None:
            self.mtp.truncate(session)

    def release(self, session: Session) -> None:
        self.paged.release(session)
        session.aux.clear()

    def session_bytes(self, session: Session) -> int:
        """The session's blocks and the linear states and snapshots it holds (shared ones included)."""
        return self.paged.session_bytes(session) + linear_state.state_bytes(session)

    # --- forward passes -------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        start, end = session.length, session.length + len(tokens)
        wanted = self._stride_points(start, end) + linear_state.boundaries_in(session, start, end)
        ids = self.paged.claim_prefill(session, tokens)
        new_slots = self.paged.slots(session, start, end)
        try:
            result = self.forward.prefill(ids, start, self._states(session), new_slots,
                                          self.paged.context(session, end), all_logits, wanted, interrupted)
        except PrefillInterrupted:
            self.paged.trim(session)
            raise
        if start and linear_state.held(session) is not None:  # a cut into these tokens (a rejected draft)
            result.snapshots.setdefault(start, linear_state.held(session))  # replays only what it keeps
        session.tokens.extend(int(t) for t in tokens)
        self._settle(session, result.states, result.snapshots)
        if self.mtp is not None:
            self.mtp.advance(session, start, self.forward.take_hidden())
        return result.logits if all_logits else result.logits[0]

    @torch.inference_mode()
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        ids = self.paged.claim_decode(sessions, tokens)
        lengths = [s.length for s in sessions]
        self.forward.rotary.ensure(max(lengths) + 1)
        positions = torch.tensor(lengths, dtype=torch.long, device=self.device)
        if self.deterministic:
            context, mask = self.paged.slot_table(sessions, padded_keys(max(lengths) + 1)), None
        else:
            context, mask = self.paged.context_slots(sessions, lengths, self.dtype)
        new_slots = context.gather(1, positions[:, None]).view(-1)
        logits, states = self.forward.decode(ids, positions, [self._states(s) for s in sessions], new_slots,
                                             context, mask)
        for session, token, new in zip(sessions, tokens, states):
            session.tokens.append(int(token))
            session.aux[linear_state.STATE] = new
            if session.length % self.state_stride == 0:
                linear_state.keep_snapshot(session, session.length, new, self.state_stride)
        if self.mtp is not None:
            advance_decoded(self.mtp, self.forward.take_hidden(), sessions)
        return logits

    # --- state as bytes -------------------------------------------------------------------------
    def state_bytes(self, length: int) -> int:
        return length * self.pool.bytes_per_token + state_chunks.aux_bytes(self.arch, length,
                                                                           self.pool.storage.element_size())

    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        kv = chunk_frames.export_rows(self.paged, session, start, end)
        aux = state_chunks.encode(self._states_at(session, end))
        return chunk_frames.framed_chunk(kv, aux)

    def _states_at(self, session: Session, end: int) -> States:
        if end == session.length:
            return self._states(session)
        if end in linear_state.snapshots(session):
            return linear_state.snapshots(session)[end]
        shorter = self.fork(session, end)  # replays from the nearest snapshot before ``end``
        states = self._states(shorter)
        self.release(shorter)
        # kept: the cache exports a session's chunks in order, so the next one replays from here
        linear_state.keep_snapshot(session, end, states, self.state_stride)
        return states

    @torch.inference_mode()
    def import_chunk(self, session: Session, tokens, data: bytes) -> None:
        kv, aux = chunk_frames.chunk_parts(data)
        states = state_chunks.decode(aux, self.arch, session.length + len(tokens), self.dtype, self.device)
        chunk_frames.import_rows(self.paged, session, tokens, kv)
        if tokens:
            self._settle(session, states, {})


QWEN3_5 = Family("Qwen3.5", {*ARCHITECTURES, "qwen35"}, Qwen35Arch.from_hf_config, Qwen35Runtime, read_weights,
                 mtp_weights_from_hf, quantize_weights)
QWEN3_5_MOE = Family("Qwen3.5-MoE", {*MOE_ARCHITECTURES, "qwen35moe"}, Qwen35Arch.from_hf_config, Qwen35Runtime, read_weights,
                     mtp_weights_from_hf, quantize_weights)
QWEN3_NEXT = Family("Qwen3-Next", {*NEXT_ARCHITECTURES, "qwen3next"}, Qwen35Arch.from_hf_config, Qwen35Runtime, read_weights,
                    mtp_weights_from_hf, quantize_weights)

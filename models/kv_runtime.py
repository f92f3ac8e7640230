"""KVRuntime: the :class:`kvgate.core.runtime.ModelRuntime` of every family whose state is per-token K/V.

A family does not subclass it: it hands it its :class:`RuntimeParts` (the name of its chunk layout,
how its pool and its forward are built, whether its forward has the invariant path) and the runtime
composes them with a :class:`PagedKV` for its sessions. Llama, Qwen3, Qwen3-MoE, GLM-4.5, MiniMax
M2, gpt-oss, Gemma 4 and DeepSeek V3 / V3.2 are such families; a family with state besides its
per-token rows (Qwen3.5's linear layers, DeepSeek V4's compressed entries) composes the same parts
in a runtime of its own.

Exported state: the chunk framing of :mod:`kvgate.models.chunk_frames`, its per-token part the
pool's rows of the chunk's tokens, no auxiliary state. An attached MTP layer (GLM-4.5 with
``[engine] speculative = "mtp"``) takes the forward's final hidden states after every pass; forks
and truncations carry its per-session state along; the main model's state is the same either way.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Optional, Sequence

import attrs
import torch

from kvgate.core.runtime import DraftHead, ModelInfo, ModelRuntime, PrefillInterrupted, Session
from kvgate.models import chunk_frames
from kvgate.models.fingerprint import state_fingerprint, weights_fingerprint
from kvgate.models.invariant_attention import padded_keys
from kvgate.models.kv_forward import KVForward
from kvgate.models.kv_pool import KVPool
from kvgate.models.mtp.head import LlamaMtpLayer, MtpHead, advance_decoded
from kvgate.models.paged_kv import PagedKV

log = logging.getLogger("kvgate")


@attrs.frozen
class RuntimeParts:
    """What a family gives the runtime.

    ``new_pool(arch, block_size, tokens, dtype, device)``: the pool of per-token state.
    ``new_forward(arch, weights, pool, max_context, deterministic)``: the forward over that pool.
    ``state_shape(arch, pool)``: the layout part of :attr:`KVRuntime.state_format`.
    ``invariant(weights)``: whether the forward has the batch- and split-invariant path
    ``engine.deterministic`` asks for (on this device).
    """

    state_name: str
    new_pool: Callable[..., KVPool]
    new_forward: Callable[..., KVForward]
    state_shape: Callable[[Any, KVPool], str]
    invariant: Callable[[Any], bool] = lambda weights: True


def kv_runtime(parts: RuntimeParts) -> Callable[..., "KVRuntime"]:
    """The runtime factory a :class:`kvgate.models.loading.Family` takes for a per-token-K/V family."""
    return functools.partial(KVRuntime, parts)


class KVRuntime(ModelRuntime):
    CHUNK_HEADER_BYTES = chunk_frames.CHUNK_HEADER_BYTES

    def __init__(self, parts: RuntimeParts, arch, weights, info: ModelInfo, tokenizer: Any,
                 chat_template: Optional[str], special_tokens: dict[str, str],
                 block_size: int = 16, kv_pool_tokens: int = 65536, deterministic: bool = False):
        self.parts, self.arch, self.weights, self.info = parts, arch, weights, info
        self.tokenizer, self.chat_template, self.special_tokens = tokenizer, chat_template, special_tokens
        self.deterministic = deterministic and parts.invariant(weights)
        if deterministic and not self.deterministic:
            log.warning("engine.deterministic: %s runs without batch- and split-invariant arithmetic "
                        "(its forward has no invariant path here): a cache hit or a batch may change greedy output",
                        arch.architecture)
        self.block_size, self.device, self.dtype = block_size, weights.embed.device, weights.embed.dtype
        self.pool = parts.new_pool(arch, block_size, kv_pool_tokens, self.dtype, self.device)
        self.paged = PagedKV(self.pool, block_size, arch.vocab_size, info.max_context)
        # digested before the forward is built: the native layer takes over its projections' GGUF blocks
        self.weights_print = weights_fingerprint(arch, weights, self.dtype)
        self.forward = parts.new_forward(arch, weights, self.pool, info.max_context, self.deterministic)
        self.mtp: Optional[MtpHead] = None
        self._fingerprint: Optional[str] = None

    def invariant_arithmetic(self) -> bool:
        """Whether the family's forward has the batch- and split-invariant path here."""
        return self.parts.invariant(self.weights)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = state_fingerprint(self.weights_print, self.deterministic, self.forward.arithmetic)
        return self._fingerprint

    def attach_mtp(self, weights) -> None:
        """Draft with the checkpoint's MTP layer (``[engine] speculative = "mtp"``)."""
        self.mtp = MtpHead(LlamaMtpLayer(self.forward, weights))
        self.forward.keep_hidden = True

    def draft_head(self) -> Optional[DraftHead]:
        return self.mtp

    # --- sessions --------------------------------------------------------------------------------
    def new_session(self) -> Session:
        return self.paged.new_session()

    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        child = self.paged.fork(session, length)
        if self.mtp is not None:
            self.mtp.fork(session, child)
        return child

    def truncate(self, session: Session, length: int) -> None:
        self.paged.truncate(session, length)
        if self.mtp is not None:
            self.mtp.truncate(session)

    def release(self, session: Session) -> None:
        self.paged.release(session)

    def session_bytes(self, session: Session) -> int:
        return self.paged.session_bytes(session)

    def pool_stats(self) -> dict[str, int]:
        return self.pool.stats()

    # --- forward passes --------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        paged, start = self.paged, session.length
        ids = paged.claim_prefill(session, tokens)
        new_slots = paged.slots(session, start, start + len(tokens))
        context = paged.context(session, start + len(tokens)) if start else None
        try:
            logits = self.forward.prefill(ids, start, new_slots, context, all_logits, interrupted)
        except PrefillInterrupted:
            paged.trim(session)
            raise
        session.tokens.extend(int(t) for t in tokens)
        if self.mtp is not None:
            self.mtp.advance(session, start, self.forward.take_hidden())
        return logits if all_logits else logits[0]

    @torch.inference_mode()
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        ids = self.paged.claim_decode(sessions, tokens)
        lengths = [s.length for s in sessions]
        self.forward.rotary.ensure(max(lengths) + 1)
        positions = torch.tensor(lengths, dtype=torch.long, device=self.device)
        context, new_slots, mask = self._decode_slots(sessions, lengths, positions)
        logits = self.forward.decode(ids, positions, new_slots, context, mask)
        for session, token in zip(sessions, tokens):
            session.tokens.append(int(token))
        if self.mtp is not None:
            advance_decoded(self.mtp, self.forward.take_hidden(), sessions)
        return logits

    def _decode_slots(self, sessions: Sequence[Session], lengths: list[int], positions: torch.Tensor):
        """(context, new token slots, padding mask) of one decode step: whole padded key blocks in the
        deterministic mode (:mod:`kvgate.models.invariant_attention`), a slot range for one session
        whose blocks are consecutive, else a slot table and its mask."""
        paged = self.paged
        if self.deterministic:
            keys = padded_keys(max(lengths) + 1)
            context = paged.padded_span(sessions, keys)
            if context is not None:
                return context, paged.slots(sessions[0], lengths[0], lengths[0] + 1), None
            context = paged.slot_table(sessions, keys)
            return context, context.gather(1, positions[:, None]).view(-1), None
        if len(sessions) == 1:
            return (paged.context(sessions[0], lengths[0] + 1), paged.slots(sessions[0], lengths[0], lengths[0] + 1),
                    None)
        context, mask = paged.context_slots(sessions, lengths, self.dtype)
        return context, context.gather(1, positions[:, None]).view(-1), mask

    # --- state as bytes --------------------------------------------------------------------------
    @property
    def state_format(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.parts.state_name} {dtype} {self.parts.state_shape(self.arch, self.pool)}"

    def state_bytes(self, length: int) -> int:
        return length * self.pool.bytes_per_token

    def state_bytes_per_token(self) -> int:
        return self.pool.bytes_per_token

    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        return chunk_frames.framed_chunk(self.export_state(session, start, end))

    def import_chunk(self, session: Session, tokens: Sequence[int], data: bytes) -> None:
        rows, aux = chunk_frames.chunk_parts(data)
        if len(aux):
            raise ValueError(f"a {self.parts.state_name} chunk holds no auxiliary state, this one has {len(aux)} bytes")
        self.import_state(session, tokens, rows)

    def export_state(self, session: Session, start: int = 0, end: Optional[int] = None) -> bytes:
        """The pooled rows of tokens [start, end) (the body of :meth:`export_chunk`)."""
        return chunk_frames.export_rows(self.paged, session, start, end)

    def import_state(self, session: Session, tokens: Sequence[int], data: bytes) -> None:
        """Append ``tokens`` with their rows ``data`` (from :meth:`export_state`)."""
        chunk_frames.import_rows(self.paged, session, tokens, data)

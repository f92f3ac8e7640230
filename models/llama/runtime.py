"""LlamaRuntime: the :class:`kvgate.core.runtime.ModelRuntime` of Llama-family models.

Exported state layout (private to this runtime, guarded by its fingerprint): the raw bytes of a
tensor ``[layers, 2 (k/v), tokens, kv_heads, head_dim]`` in the runtime dtype, C order. A chunk
(:meth:`LlamaRuntime.export_chunk`, format :attr:`LlamaRuntime.state_format`) is
``u64 kv_len, u64 aux_len`` (little-endian), then those KV bytes, then ``aux_len`` bytes of
auxiliary state at the chunk's end -- none for Llama (``aux_len`` is 0), room for runtimes that
have some.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Optional, Sequence

import torch

from kvgate.core.runtime import ModelInfo, ModelRuntime, PrefillInterrupted, Session, check_decode_batch
from kvgate.models.cpu_kernels.rms_norm import FINGERPRINT as NORM_FINGERPRINT
from kvgate.models.prefill_attention import fp32_attention_keys
from kvgate.models.llama.forward import LlamaForward
from kvgate.models.fingerprint import weights_fingerprint
from kvgate.models.invariant_attention import padded_keys
from kvgate.models.kv_pool import KVPool
from kvgate.models.llama.layers import LlamaArch, LlamaWeights
from kvgate.models.rope import Rotary
from kvgate.models.block_tables import BlockTables

log = logging.getLogger("kvgate")


class LlamaRuntime(BlockTables, ModelRuntime):
    STATE_NAME = "llama-kv/1"  # the chunk layout's name in :attr:`state_format` (a family reusing it renames it)
    FORWARD = LlamaForward  # the forward class (a family that needs more of the forward subclasses it)

    def __init__(self, arch: LlamaArch, weights: LlamaWeights, info: ModelInfo, tokenizer: Any,
                 chat_template: Optional[str], special_tokens: dict[str, str],
                 block_size: int = 16, kv_pool_tokens: int = 65536, deterministic: bool = False):
        self.arch, self.weights, self.info = arch, weights, info
        self.deterministic = deterministic and self.invariant_arithmetic()
        if deterministic and not self.deterministic:
            log.warning("engine.deterministic: %s runs without batch- and split-invariant arithmetic "
                        "(its forward has no invariant path yet): a cache hit or a batch may change greedy output",
                        arch.architecture)
        self.tokenizer, self.chat_template, self.special_tokens = tokenizer, chat_template, special_tokens
        self.block_size = block_size
        self.device = weights.embed.device
        self.dtype = weights.embed.dtype
        self.pool = self.new_pool(kv_pool_tokens)
        self.forward = self.new_forward()
        self._ids = itertools.count(1)
        self._fingerprint: Optional[str] = None

    def invariant_arithmetic(self) -> bool:
        """Whether this runtime's forward has the batch- and split-invariant path ``engine.deterministic``
        asks for: the Llama forward has one, dense and mixture-of-experts layers alike
        (:func:`kvgate.models.moe.experts.moe_mlp`); a family with its own forward says whether its
        forward has one by overriding this."""
        return True

    def new_pool(self, kv_pool_tokens: int) -> KVPool:
        """The pool of per-token state (a family with another layout overrides this and :meth:`new_forward`)."""
        arch = self.arch
        return KVPool(arch.layers, arch.kv_heads, arch.head_dim, self.block_size, kv_pool_tokens, self.dtype,
                      self.device)

    def new_forward(self) -> LlamaForward:
        arch = self.arch
        rotary = Rotary(arch.rotary_dim or arch.head_dim, arch.rope_theta, arch.rope_scaling, self.dtype, self.device,
                        initial_positions=min(self.info.max_context, 8192))
        return self.FORWARD(arch, self.weights, self.pool, rotary, fp32_attention_keys(self.device, self.dtype),
                            self.deterministic)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            # the attention arithmetic is part of the state: KV of one mode never serves the other
            mode = "/invariant-flash" if self.deterministic else ""
            if getattr(self.forward, "norm_kernel", None) is not None:
                mode += NORM_FINGERPRINT
            self._fingerprint = weights_fingerprint(self.arch, self.weights, self.dtype) + mode
        return self._fingerprint

    # --- forward passes -------------------------------------------------------------------------
    def _check_room(self, session: Session, count: int) -> None:
        if session.length + count > self.info.max_context:
            raise ValueError(f"context full: {session.length} + {count} tokens exceed max_context "
                             f"{self.info.max_context}")

    def _token_tensor(self, tokens: Sequence[int]) -> torch.Tensor:
        tokens = list(tokens)
        if tokens and (min(tokens) < 0 or max(tokens) >= self.arch.vocab_size):
            raise ValueError(f"token id out of range [0, {self.arch.vocab_size})")
        return torch.tensor(tokens, dtype=torch.long, device=self.device)

    def _claim_prefill(self, session: Session, tokens: Sequence[int]) -> torch.Tensor:
        """The ids of ``tokens`` to prefill after ``session``, with room checked and blocks reserved."""
        if len(tokens) == 0:
            raise ValueError("prefill needs at least one token")
        ids = self._token_tensor(tokens)
        self._check_room(session, len(tokens))
        self._reserve([session], len(tokens))
        return ids

    def _claim_decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        """The ids of one decode step's ``tokens``, with room checked and a slot reserved per session."""
        check_decode_batch(sessions, tokens)
        ids = self._token_tensor(tokens)
        for session in sessions:
            self._check_room(session, 1)
        self._reserve(sessions, 1)
        return ids

    @torch.inference_mode()
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        start = session.length
        ids = self._claim_prefill(session, tokens)
        new_slots = self.pool.slots(session.block_table, start, start + len(tokens))
        context = self._context(session, start + len(tokens)) if start else None
        try:
            logits = self.forward.prefill(ids, start, new_slots, context, all_logits, interrupted)
        except PrefillInterrupted:
            self._trim(session)  # state past the session's length was never counted as held
            raise
        session.tokens.extend(int(t) for t in tokens)
        return logits if all_logits else logits[0]

    @torch.inference_mode()
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        ids = self._claim_decode(sessions, tokens)
        lengths = [s.length for s in sessions]
        self.forward.rotary.ensure(max(lengths) + 1)
        positions = torch.tensor(lengths, dtype=torch.long, device=self.device)
        if self.deterministic:  # every row over whole key blocks (kvgate.models.invariant_attention)
            mask, keys = None, padded_keys(max(lengths) + 1)
            context = self._padded_span(sessions, keys)
            if context is None:
                context = self._slot_table(sessions, keys)
                new_slots = context.gather(1, positions[:, None]).view(-1)
            else:
                new_slots = self.pool.slots(sessions[0].block_table, lengths[0], lengths[0] + 1)
        elif len(sessions) == 1:
            context, mask = self._context(sessions[0], lengths[0] + 1), None
            new_slots = self.pool.slots(sessions[0].block_table, lengths[0], lengths[0] + 1)
        else:
            context, mask = self._context_slots(sessions, lengths)
            new_slots = context.gather(1, positions[:, None]).view(-1)
        logits = self.forward.decode(ids, positions, new_slots, context, mask)
        for session, token in zip(sessions, tokens):
            session.tokens.append(int(token))
        return logits

    def _context(self, session: Session, end: int):
        """Positions [0, end) of one session: a slot range when its blocks are consecutive, else slots."""
        span = self.pool.span(session.block_table, end)
        return span if span is not None else self.pool.slots(session.block_table, 0, end)

    def _padded_span(self, sessions: Sequence[Session], keys: int) -> Optional[slice]:
        """For one session whose blocks are consecutive, the slot range of its first ``keys`` keys
        (padding included) when all of it lies in blocks the pool has handed out, else None. The
        padding keys then hold zeros or another session's finite K/V, which the invariant attention's
        mask hides exactly as it hides gathered padding, and the attention reads a view, not a copy."""
        if len(sessions) != 1:
            return None
        session = sessions[0]
        span = self.pool.span(session.block_table, session.length + 1)
        if span is None or span.start + keys > self.pool.blocks_allocated * self.block_size:
            return None
        return slice(span.start, span.start + keys)

    def _context_slots(self, sessions: Sequence[Session], lengths: list[int]):
        """Slots [batch, keys] of every session's context incl. the new token, and the padding mask."""
        slots = self._slot_table(sessions)
        keys = torch.arange(slots.shape[1], device=self.device)
        limit = torch.tensor(lengths, dtype=torch.long, device=self.device)[:, None]
        mask = torch.zeros(len(sessions), 1, 1, slots.shape[1], dtype=self.dtype, device=self.device)
        mask.masked_fill_((keys[None, :] > limit)[:, None, None, :], float("-inf"))  # additive: built once a step
        return slots, mask

    def _slot_table(self, sessions: Sequence[Session], keys: int = 0) -> torch.Tensor:
        """Slots [batch, keys'] of every session's blocks, at least ``keys`` of them: padding repeats a
        session's first block (its values are finite; the attention hides them)."""
        bs = self.block_size
        width = max(max(len(s.block_table) for s in sessions), -(-keys // bs))
        table = torch.tensor([s.block_table + s.block_table[:1] * (width - len(s.block_table)) for s in sessions],
                             dtype=torch.long, device=self.device)
        offsets = torch.arange(bs, device=self.device)
        return (table[:, :, None] * bs + offsets).view(len(sessions), width * bs)

    # --- state as bytes -------------------------------------------------------------------------
    CHUNK_HEADER_BYTES = 16  # u64 kv_len, u64 aux_len

    @property
    def state_format(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.STATE_NAME} {dtype} {self.arch.layers}x{self.arch.kv_heads}x{self.arch.head_dim}"

    def state_bytes(self, length: int) -> int:
        return length * self.state_bytes_per_token()

    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        return self.framed_chunk(self.export_state(session, start, end))

    def import_chunk(self, session: Session, tokens: Sequence[int], data: bytes) -> None:
        kv, aux = self.chunk_parts(data)
        if len(aux):
            raise ValueError(f"a Llama chunk holds no auxiliary state, this one has {len(aux)} bytes")
        self.import_state(session, tokens, kv)

    @staticmethod
    def framed_chunk(kv: bytes, aux: bytes = b"") -> bytes:
        """A chunk: its header (u64 kv_len, u64 aux_len), the KV, then the auxiliary state."""
        return len(kv).to_bytes(8, "little") + len(aux).to_bytes(8, "little") + kv + aux

    def chunk_parts(self, data: bytes) -> tuple[memoryview, memoryview]:
        """(KV, auxiliary state) of a chunk, its header checked against its length."""
        head = self.CHUNK_HEADER_BYTES
        if len(data) < head:
            raise ValueError(f"a chunk needs a {head}-byte header, got {len(data)} bytes")
        kv_len, aux_len = int.from_bytes(data[:8], "little"), int.from_bytes(data[8:16], "little")
        if head + kv_len + aux_len != len(data):
            raise ValueError(f"chunk of {len(data)} bytes, its header describes {head + kv_len + aux_len}")
        view = memoryview(data)
        return view[head:head + kv_len], view[head + kv_len:]

    def state_bytes_per_token(self) -> int:
        """Bytes of KV one token occupies (this runtime's per-token layout, under its chunks)."""
        return self.pool.bytes_per_token

    def export_state(self, session: Session, start: int = 0, end: Optional[int] = None) -> bytes:
        """The KV of tokens [start, end) (the body of :meth:`export_chunk`)."""
        end = session.length if end is None else end
        if not 0 <= start <= end <= session.length:
            raise ValueError(f"bad token range [{start}, {end}) for a session of {session.length} tokens")
        kv = self.pool.read(self.pool.slots(session.block_table, start, end))
        return kv.contiguous().cpu().view(torch.uint8).numpy().tobytes()

    @torch.inference_mode()
    def import_state(self, session: Session, tokens: Sequence[int], data: bytes) -> None:
        """Append ``tokens`` with their KV ``data`` (from :meth:`export_state`)."""
        count = len(tokens)
        expected = count * self.state_bytes_per_token()
        if len(data) != expected:
            raise ValueError(f"state of {count} tokens must be {expected} bytes, got {len(data)}")
        if count == 0:
            return
        self._token_tensor(tokens)
        self._check_room(session, count)
        kv = self._imported_state(torch.frombuffer(bytearray(data), dtype=torch.uint8), count)
        start = session.length
        self._reserve([session], count)
        self.pool.write(self.pool.slots(session.block_table, start, start + count), kv)
        session.tokens.extend(int(t) for t in tokens)

    def _imported_state(self, raw: torch.Tensor, count: int) -> torch.Tensor:
        """What the pool writes for ``count`` tokens' exported bytes ``raw`` (uint8); a family whose
        pool takes another form overrides this."""
        pool = self.pool
        return raw.view(self.dtype).view(pool.layers, pool.parts, count, pool.kv_heads, pool.head_dim).to(self.device)

"""DeepSeek V4's MTP layer as a :class:`~kvgate.core.runtime.DraftHead`.

MTP position ``i`` pairs the main model's residual streams at ``i`` (before their final collapse)
with token ``i + 1``: its block input is ``h_proj(hnorm(streams_i)) + e_proj(enorm(embed(token)))``
per stream (the embedding zeroed at position 0). The block is a V4 decoder layer with sliding-only
attention over the MTP positions of its window; its output streams are collapsed by the layer's own
head mixer, normed and projected by the output head. A draft chains: step ``k`` reads the previous
step's output streams in place of the main model's.

Per session (``Session.aux``) the head keeps the K=V vectors of the MTP positions it has seen
(the last window and a margin) and the main model's streams of the latest positions; forks and
truncations cut both, and a position whose streams are gone (an imported chunk carries none) is
left out: that only changes what is drafted, never the output.

It runs with the main forward's :class:`~.arithmetic.Arithmetic`; in the deterministic mode its
attention is :func:`~.exact_attention.exact_attend` over ``window`` slots, so a session drafts the
same tokens whatever else the server runs.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch
import torch.nn.functional as F

from kvgate.core.runtime import Session
from kvgate.models.deepseek_v4.attention import attend, key_values, norm, output, queries
from kvgate.models.deepseek_v4.exact_attention import exact_attend
from kvgate.models.deepseek_v4.hyper import collapse_head, expand, mix
from kvgate.models.deepseek_v4.moe import moe_mlp

STATE = "deepseek_v4_mtp"
MARGIN = 64  # positions kept past the window: more than a verifying forward appends


@attrs.define
class DraftState:
    kv: torch.Tensor  # [rows, head_dim] of ``positions``, ascending
    positions: torch.Tensor
    tail: Optional[torch.Tensor] = None  # main streams [rows, hc, hidden] of positions from tail_start
    tail_start: int = 0

    def cut(self, length: int) -> "DraftState":
        """The state of the session's first ``length`` tokens (MTP positions < length - 1)."""
        keep = self.positions < length - 1
        tail = None
        if self.tail is not None and length > self.tail_start:
            tail = self.tail[:length - self.tail_start].clone()
        return DraftState(self.kv[keep], self.positions[keep], tail, self.tail_start)


class V4DraftHead:
    def __init__(self, forward, weights, arch):
        self.forward, self.weights, self.arch = forward, weights, arch

    def _state(self, session: Session) -> DraftState:
        if STATE not in session.aux:
            device, dtype = self.weights.embed.device, self.weights.embed.dtype
            session.aux[STATE] = DraftState(torch.empty(0, self.arch.head_dim, dtype=dtype, device=device),
                                            torch.empty(0, dtype=torch.long, device=device))
        return session.aux[STATE]

    def block_input(self, streams: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        w, eps, ops = self.weights, self.arch.rms_eps, self.forward.ops
        embedded = torch.where((positions == 0)[:, None], 0, w.embed[tokens])
        token_part = ops.linear(norm(embedded, w.enorm, eps), w.e_proj)[:, None]
        return ops.linear(norm(streams, w.hnorm, eps), w.h_proj) + token_part

    def _attention_input(self, streams: torch.Tensor):
        arch, block = self.arch, self.weights.block
        x, post, comb = mix(streams, block.attn_mixer, arch.hc_iters, arch.hc_eps, arch.rms_eps, self.forward.ops)
        return norm(x, block.attn_norm, arch.rms_eps), post, comb

    def advance(self, session: Session, start: int, streams: torch.Tensor) -> None:
        """Take the main model's streams [n, hc, hidden] of positions [start, start + n) (their tokens
        are in ``session``): the K=V of every MTP position that now has its token."""
        state = self._state(session)
        previous = state.tail[start - 1 - state.tail_start:start - state.tail_start] if (
            state.tail is not None and state.tail_start < start <= state.tail_start + state.tail.shape[0]) else None
        first = start - (previous is not None)
        hidden = streams[:-1] if previous is None else torch.cat([previous, streams[:-1]])
        if hidden.shape[0]:
            device = streams.device
            positions = torch.arange(first, first + hidden.shape[0], device=device)
            tokens = torch.tensor(session.tokens[first + 1:first + 1 + hidden.shape[0]], device=device)
            x, _, _ = self._attention_input(self.block_input(hidden, tokens, positions))
            kv = key_values(x, self.weights.block.attention, self.arch, *self.forward.main_rope.angles(positions),
                            self.forward.ops)
            state.kv, state.positions = torch.cat([state.kv, kv]), torch.cat([state.positions, positions])
            keep = self.arch.window + MARGIN
            state.kv, state.positions = state.kv[-keep:].clone(), state.positions[-keep:].clone()
        if state.tail is not None and state.tail_start + state.tail.shape[0] == start:
            streams, start = torch.cat([state.tail, streams]), state.tail_start
        drop = max(streams.shape[0] - MARGIN, 0)
        state.tail, state.tail_start = streams[drop:].clone(), start + drop

    @torch.inference_mode()
    def draft_logits(self, session: Session, token: int, count: int) -> list[torch.Tensor]:
        """The logits [vocab] (fp32) of each drafted position; none without the streams to start from."""
        state, length = self._state(session), session.length
        if count <= 0 or state.tail is None or not state.tail_start < length <= state.tail_start + state.tail.shape[0]:
            return []
        hidden = state.tail[length - 1 - state.tail_start][None]
        kv, positions, out = state.kv, state.positions, []
        for step in range(count):
            position = torch.tensor([length - 1 + step], device=kv.device)
            streams = self.block_input(hidden, torch.tensor([token], device=kv.device), position)
            hidden, new_kv, logits = self._block(streams, position, kv, positions)
            kv, positions = torch.cat([kv, new_kv]), torch.cat([positions, position])
            token = int(logits.argmax())
            out.append(logits)
        return out

    def draft(self, session: Session, token: int, count: int) -> list[int]:
        return [int(logits.argmax()) for logits in self.draft_logits(session, token, count)]

    def _block(self, streams, position, past_kv, past_positions):
        arch, block, w, ops = self.arch, self.weights.block, self.weights, self.forward.ops
        x, post, comb = self._attention_input(streams)
        cos, sin = self.forward.main_rope.angles(position)
        q, _ = queries(x, block.attention, arch, cos, sin, ops)
        kv = key_values(x, block.attention, arch, cos, sin, ops)
        in_window = past_positions > position - arch.window
        keys = torch.cat([past_kv[in_window], kv])[None]
        attended = self._attend(q, keys, block.attention.sinks)
        streams = expand(streams, output(attended, block.attention, arch, cos, sin, ops), post, comb)
        x, post, comb = mix(streams, block.mlp_mixer, arch.hc_iters, arch.hc_eps, arch.rms_eps, ops)
        mlp = moe_mlp(norm(x, block.mlp_norm, arch.rms_eps), position, block.moe, arch, ops)
        streams = expand(streams, mlp, post, comb)
        hidden = collapse_head(streams, w.head_mixer, arch.hc_eps, arch.rms_eps, ops)
        return streams, kv, ops.linear(norm(hidden, w.norm, arch.rms_eps), w.lm_head).float()[0]

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
        """q [1, heads, dim] over all of ``keys`` [1, <= window, dim]."""
        if not self.forward.ops.exact:
            return attend(q, keys, torch.ones(keys.shape[:2], dtype=torch.bool, device=keys.device), None, None, sinks)
        pad = self.arch.window - keys.shape[1]  # the window's slots, the missing ones first (as window_keys has them)
        present = torch.arange(self.arch.window, device=keys.device)[None] >= pad
        return exact_attend(q, F.pad(keys, (0, 0, pad, 0)), present, None, None, sinks, self.arch.index_topk)

    def state_bytes(self, session: Session) -> int:
        state = session.aux.get(STATE)
        if state is None:
            return 0
        tensors = [state.kv, state.positions] + ([state.tail] if state.tail is not None else [])
        return sum(t.numel() * t.element_size() for t in tensors)

    def fork(self, parent: Session, child: Session) -> None:
        if STATE in parent.aux:
            child.aux[STATE] = parent.aux[STATE].cut(child.length)

    def truncate(self, session: Session) -> None:
        if STATE in session.aux:
            session.aux[STATE] = session.aux[STATE].cut(session.length)

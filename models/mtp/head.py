"""The MTP draft head: one extra decoder layer that guesses the token after next.

The math follows the DeepSeek-V3 MTP definition. For position ``i`` with the main model's final
hidden state ``h_i`` (after the final norm: the output head's input) and the next token ``t_{i+1}``::

    x_i = eh_proj(concat(enorm(embed(t_{i+1})), hnorm(h_i)))   # embedding first, then hidden
    g_i = block(x_i)                                            # attends over MTP positions <= i
    logits = head(shared_head.norm(g_i))                        # a guess of t_{i+2}

The concat order is the one of the released checkpoints' reference implementations (embedding
first); the paper writes the hidden state first. Drafting more than one token chains the layer on
its own output: ``g_i`` takes the place of ``h_{i+1}`` and the drafted token that of ``t_{i+2}``;
the chained positions' keys are used for that draft only, never kept. Drafts are greedy. The
state per session is :class:`kvgate.models.mtp.state.MtpState`; keeping a committed position needs
only its key and value, so the block's attention output and experts run for drafted positions only.

:class:`MtpHead` is the family-independent part (per-session state, keeping committed positions,
drafting, forks and cuts); it composes a family's :class:`MtpLayer`, the layer's own math over its
main model's forward: :class:`LlamaMtpLayer` here (GLM-4.5, DeepSeek V3), Qwen3.5's in
:mod:`kvgate.models.qwen3_5.mtp_layer`.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

import torch
import torch.nn.functional as F

from kvgate.core.runtime import Session
from kvgate.models.llama.forward import LlamaForward
from kvgate.models.mtp.state import MtpState
from kvgate.models.mtp.weights import MtpWeights


class MtpLayer(Protocol):
    """One family's MTP layer over its main model's forward."""

    def new_state(self) -> MtpState:
        """An empty per-session state shaped for the layer's keys and values."""

    def keys(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        """``(k, v)`` of the layer at ``positions``, whose inputs are the next tokens ``tokens`` [n] and
        the main model's final hidden states ``hidden`` [n, hidden]."""

    def step(self, token: int, hidden: torch.Tensor, position: int, past: tuple[torch.Tensor, torch.Tensor]):
        """``(logits [vocab], the hidden state a chained draft takes next [1, hidden], k, v)`` of one
        drafted position attending over ``past`` keys and values and its own."""


class LlamaMtpLayer:
    """The DeepSeek-V3 MTP layer (GLM-4.5, DeepSeek V3) over a :class:`LlamaForward`'s helpers."""

    def __init__(self, forward: LlamaForward, weights: MtpWeights):
        self.forward, self.weights = forward, weights

    def new_state(self) -> MtpState:
        arch, embed = self.forward.arch, self.weights.embed
        return MtpState.empty(arch.kv_heads, arch.head_dim, embed.dtype, embed.device)

    def _input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        w, norm = self.weights, self.forward._norm
        return self.forward._linear(torch.cat([norm(w.embed[tokens], w.enorm), norm(hidden, w.hnorm)], -1), w.eh_proj)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        self.forward.rotary.ensure(int(positions.max()) + 1)
        cos, sin = self.forward.rotary.tables(positions)
        return self.forward._qkv(x, self.weights.block, cos, sin)

    def keys(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        _, k, v = self._qkv(self._input(tokens, hidden), positions)
        return k, v

    def step(self, token: int, hidden: torch.Tensor, position: int, past: tuple[torch.Tensor, torch.Tensor]):
        fwd, w = self.forward, self.weights
        arch = fwd.arch
        device = hidden.device
        x = self._input(torch.tensor([token], device=device), hidden)
        q, k, v = self._qkv(x, torch.tensor([position], device=device))
        keys, values = (torch.cat([p, n]) for p, n in zip(past, (k, v)))
        grouped = q.view(1, arch.kv_heads, arch.heads // arch.kv_heads, arch.head_dim)
        attn = F.scaled_dot_product_attention(grouped, keys.transpose(0, 1)[None], values.transpose(0, 1)[None])
        x = x + fwd._linear(attn.reshape(1, -1), w.block.o, w.block.o_bias)
        out = fwd._mlp(x, w.block)
        logits = fwd._linear(fwd._norm(out, w.head_norm), w.head).float()[0]
        return logits, out, k, v


class MtpHead:
    """Implements :class:`kvgate.core.runtime.DraftHead` with one family's :class:`MtpLayer`."""

    def __init__(self, layer: MtpLayer):
        self.layer = layer

    def state(self, session: Session) -> MtpState:
        if "mtp" not in session.aux:
            session.aux["mtp"] = self.layer.new_state()
        return session.aux["mtp"]

    @torch.inference_mode()
    def advance(self, session: Session, start: int, hidden: torch.Tensor) -> None:
        """After a forward appended positions [start, length) with final hidden states ``hidden``:
        keep the MTP keys of every position whose hidden state and next token are now known."""
        state = self.state(session)
        before = state.hidden_at(start - 1)
        rows = hidden[:-1] if before is None else torch.cat([before, hidden[:-1]])
        first = start if before is None else start - 1
        if rows.shape[0]:
            device = hidden.device
            positions = torch.arange(first, first + rows.shape[0], device=device)
            nexts = torch.tensor(session.tokens[first + 1: first + 1 + rows.shape[0]], device=device)
            k, v = self.layer.keys(nexts, rows, positions)
            state.append(k, v, positions)
        state.keep_hidden(start, hidden)

    @torch.inference_mode()
    def logits(self, session: Session, token: int) -> Optional[torch.Tensor]:
        """The layer's logits for the token after ``token`` (about to be appended), or None."""
        state = session.aux.get("mtp")
        hidden = state.hidden_at(session.length - 1) if state is not None else None
        if hidden is None:
            return None
        return self.layer.step(token, hidden, session.length - 1, state.past())[0]

    @torch.inference_mode()
    def draft(self, session: Session, token: int, count: int) -> list[int]:
        state = session.aux.get("mtp")
        hidden = state.hidden_at(session.length - 1) if state is not None else None
        if hidden is None:
            return []
        past, out = state.past(), []
        for position in range(session.length - 1, session.length - 1 + count):
            logits, hidden, k, v = self.layer.step(token, hidden, position, past)
            token = int(torch.argmax(logits))
            out.append(token)
            past = (torch.cat([past[0], k]), torch.cat([past[1], v]))
        return out

    def truncate(self, session: Session) -> None:
        if "mtp" in session.aux:
            session.aux["mtp"].cut(session.length)

    def fork(self, parent: Session, child: Session) -> None:
        if "mtp" in parent.aux:
            child.aux["mtp"] = parent.aux["mtp"].copy(child.length)


def advance_decoded(head, hidden: torch.Tensor, sessions: Sequence[Session]) -> None:
    """Give a draft head (this one, or DeepSeek V4's) each session's newest token after a decode step:
    row ``i`` of ``hidden`` is session ``i``'s."""
    for row, session in enumerate(sessions):
        head.advance(session, session.length - 1, hidden[row: row + 1])

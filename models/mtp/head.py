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
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from kvgate.core.runtime import Session
from kvgate.models.llama.forward import LlamaForward
from kvgate.models.mtp.state import MtpState
from kvgate.models.mtp.weights import MtpWeights


class MtpHead:
    """Implements :class:`kvgate.core.runtime.DraftHead` over the main model's forward helpers."""

    def __init__(self, forward: LlamaForward, weights: MtpWeights):
        self.forward, self.weights = forward, weights

    def state(self, session: Session) -> MtpState:
        if "mtp" not in session.aux:
            arch, embed = self.forward.arch, self.weights.embed
            session.aux["mtp"] = MtpState.empty(arch.kv_heads, arch.head_dim, embed.dtype, embed.device)
        return session.aux["mtp"]

    def _input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        w, norm = self.weights, self.forward._norm
        return self.forward._linear(torch.cat([norm(w.embed[tokens], w.enorm), norm(hidden, w.hnorm)], -1), w.eh_proj)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        self.forward.rotary.ensure(int(positions.max()) + 1)
        cos, sin = self.forward.rotary.tables(positions)
        return self.forward._qkv(x, self.weights.block, cos, sin)

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
            _, k, v = self._qkv(self._input(nexts, rows), positions)
            state.append(k, v, positions)
        state.keep_hidden(start, hidden)

    def _step(self, token: int, hidden: torch.Tensor, position: int, past: tuple[torch.Tensor, torch.Tensor]):
        """(logits [vocab], block output [1, hidden], key, value) of one drafted position."""
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

    @torch.inference_mode()
    def logits(self, session: Session, token: int) -> Optional[torch.Tensor]:
        """The layer's logits for the token after ``token`` (about to be appended), or None."""
        state = session.aux.get("mtp")
        hidden = state.hidden_at(session.length - 1) if state is not None else None
        if hidden is None:
            return None
        return self._step(token, hidden, session.length - 1, state.past())[0]

    @torch.inference_mode()
    def draft(self, session: Session, token: int, count: int) -> list[int]:
        state = session.aux.get("mtp")
        hidden = state.hidden_at(session.length - 1) if state is not None else None
        if hidden is None:
            return []
        past, out = state.past(), []
        for position in range(session.length - 1, session.length - 1 + count):
            logits, hidden, k, v = self._step(token, hidden, position, past)
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

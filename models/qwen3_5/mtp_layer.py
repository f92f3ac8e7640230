"""The Qwen3.5-family MTP layer (a :class:`kvgate.models.mtp.head.MtpLayer`, which the shared
:class:`~kvgate.models.mtp.head.MtpHead` drafts with) over the Qwen3.5 forward and
:class:`.mtp_weights.Qwen35MtpWeights`.

For position ``i`` with the main model's hidden state ``h_i`` after its final norm (the output
head's input) and the next token ``t_{i+1}`` (as vLLM's and SGLang's Qwen3-Next / Qwen3.5 MTP)::

    x_i = fc(concat(pre_fc_norm_embedding(embed(t_{i+1})), pre_fc_norm_hidden(h_i)))
    g_i = block(x_i)                  # a gated full-attention layer over MTP positions <= i, its MLP / MoE
    logits = lm_head(norm(g_i))       # the main model's output head: a guess of t_{i+2}

What differs from GLM-4.5's layer: zero-centred norms (held as ``1 + w``), the gated attention
with per-head q/k norms and partial RoPE, and chaining: a second drafted token takes ``norm(g_i)``
(the layer's normed output, as the reference implementations feed back) in place of ``h_{i+1}``.
The layer's state is per-token K/V of MTP positions only, never the linear layers' recurrent state,
so a rejected draft is undone by the head's ``truncate`` while the runtime rolls the main model's
recurrent state back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.mtp.state import MtpState
from kvgate.models.qwen3_5.forward import Qwen35Forward
from kvgate.models.qwen3_5.mtp_weights import Qwen35MtpWeights


class Qwen35MtpLayer:
    """Implements :class:`kvgate.models.mtp.head.MtpLayer` for Qwen3.5, Qwen3.5-MoE and Qwen3-Next."""

    def __init__(self, forward: Qwen35Forward, weights: Qwen35MtpWeights):
        self.forward, self.weights = forward, weights

    def new_state(self) -> MtpState:
        arch, embed = self.forward.arch, self.forward.weights.embed
        return MtpState.empty(arch.kv_heads, arch.head_dim, embed.dtype, embed.device)

    def _input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        w, norm, embed = self.weights, self.forward._norm, self.forward.weights.embed
        return self.forward._linear(torch.cat([norm(embed[tokens], w.embed_norm), norm(hidden, w.hidden_norm)], -1),
                                    w.fc)

    def _qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """((q, its output gate), k, v) of the block's attention at ``positions``."""
        fwd, block = self.forward, self.weights.block
        fwd.rotary.ensure(int(positions.max()) + 1)
        cos, sin = fwd.rotary.tables(positions)
        q, gate, k, v = fwd._qkv(fwd._norm(x, block.attn_norm), block.full, cos, sin)
        return (q, gate), k, v

    def keys(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor):
        _, k, v = self._qkv(self._input(tokens, hidden), positions)
        return k, v

    def step(self, token: int, hidden: torch.Tensor, position: int, past: tuple[torch.Tensor, torch.Tensor]):
        """(logits [vocab], the layer's normed output [1, hidden], key, value) of one drafted position."""
        fwd, w = self.forward, self.weights
        arch, device = fwd.arch, hidden.device
        x = self._input(torch.tensor([token], device=device), hidden)
        (q, gate), k, v = self._qkv(x, torch.tensor([position], device=device))
        keys, values = (torch.cat([p, n]) for p, n in zip(past, (k, v)))
        grouped = q.view(1, arch.kv_heads, arch.heads // arch.kv_heads, arch.head_dim)
        attn = F.scaled_dot_product_attention(grouped, keys.transpose(0, 1)[None], values.transpose(0, 1)[None])
        x = x + fwd._gated_out(attn, gate, w.block.full)
        out = fwd._norm(fwd._mlp(x, w.block), w.norm)
        return fwd._linear(out, fwd.weights.lm_head).float()[0], out, k, v

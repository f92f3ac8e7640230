"""MiniMax M2's forward: the Llama forward (its experts, invariant in the deterministic mode), with q
and k RMS-normalised over their whole projections (all heads together, as MiniMax M2 does) before
the partial RoPE."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.llama.forward import LlamaForward
from kvgate.models.rope import apply_rotary


class MinimaxM2Forward(LlamaForward):
    def _qkv(self, x: torch.Tensor, layer, cos: torch.Tensor, sin: torch.Tensor):
        """q [n, heads, dim], k and v [n, kv_heads, dim] for hidden states x [n, hidden]."""
        arch = self.arch
        qkv = self._linear(self._norm(x, layer.attn_norm), layer.qkv, layer.qkv_bias)
        q_width = arch.heads * arch.head_dim
        norms = layer.qk_norm.view(-1)
        q = F.rms_norm(qkv[:, :q_width], (q_width,), norms[:q_width], arch.rms_eps)
        k_width = self.qk_width - q_width
        k = F.rms_norm(qkv[:, q_width:self.qk_width], (k_width,), norms[q_width:], arch.rms_eps)
        qk = rotate_heads(torch.cat([q, k], -1).view(-1, arch.heads + arch.kv_heads, arch.head_dim),
                          arch.rotary_dim, cos, sin)
        v = qkv[:, self.qk_width:].view(-1, arch.kv_heads, arch.head_dim)
        return qk[:, : arch.heads], qk[:, arch.heads:], v


def rotate_heads(heads: torch.Tensor, rotary_dim: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the first ``rotary_dim`` dims of each head [n, heads, dim]; the rest pass through."""
    if rotary_dim == heads.shape[-1]:
        return apply_rotary(heads, cos, sin)
    return torch.cat([apply_rotary(heads[..., :rotary_dim], cos, sin), heads[..., rotary_dim:]], -1)

"""Manifold-constrained hyper-connections: ``hc`` residual streams per token.

Before a block the streams [n, hc, hidden] are flattened, RMS-normed (no weight) and projected by
the mixer to ``pre`` (hc), ``post`` (hc) and ``comb`` (hc x hc) logits, each times its ``scale``
plus its ``base``: ``pre = sigmoid + eps`` collapses the streams into the block's input,
``post = 2 sigmoid`` spreads the block's output back over the streams, and ``comb`` -- a softmax
made doubly stochastic by Sinkhorn iterations -- mixes the old streams:
``streams' = post * out + comb^T @ streams``. After the last layer a head mixer collapses the
streams once more (``pre`` only). All of it is computed in fp32, with the given
:class:`~.arithmetic.Arithmetic`'s projection and sigmoid.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvgate.models.deepseek_v4.arithmetic import PLAIN, Arithmetic


def _mixes(streams: torch.Tensor, fn: torch.Tensor, norm_eps: float, ops: Arithmetic) -> torch.Tensor:
    flat = streams.flatten(1).float()
    return ops.linear(F.rms_norm(flat, (flat.shape[-1],), eps=norm_eps), fn)


def mix(streams: torch.Tensor, mixer, iters: int, eps: float, norm_eps: float, ops: Arithmetic = PLAIN):
    """(the block input [n, hidden], post [n, hc], comb [n, hc, hc]) of ``streams`` [n, hc, hidden]."""
    hc = streams.shape[1]
    pre, post, comb = _mixes(streams, mixer.fn, norm_eps, ops).split([hc, hc, hc * hc], -1)
    pre_base, post_base, comb_base = mixer.base.split([hc, hc, hc * hc])
    pre = ops.elementwise(torch.sigmoid, pre * mixer.scale[0] + pre_base) + eps
    post = 2 * ops.elementwise(torch.sigmoid, post * mixer.scale[1] + post_base)
    comb = torch.softmax(comb.unflatten(-1, (hc, hc)) * mixer.scale[2] + comb_base.view(hc, hc), -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    collapsed = (pre[..., None] * streams).sum(1).to(streams.dtype)
    return collapsed, post, comb


def expand(streams: torch.Tensor, out: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """The streams after a block whose output is ``out`` [n, hidden]."""
    dtype = streams.dtype
    return post.to(dtype)[..., None] * out[:, None, :] + torch.matmul(comb.to(dtype).transpose(-1, -2), streams)


def collapse_head(streams: torch.Tensor, mixer, eps: float, norm_eps: float, ops: Arithmetic = PLAIN) -> torch.Tensor:
    """The final hidden states [n, hidden] of the last layer's streams."""
    pre = ops.elementwise(torch.sigmoid, _mixes(streams, mixer.fn, norm_eps, ops) * mixer.scale + mixer.base) + eps
    return (pre[..., None] * streams).sum(1).to(streams.dtype)

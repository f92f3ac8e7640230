"""The arithmetic DeepSeek V4's forward runs with: torch's own ops, or in the deterministic mode
(``engine.deterministic``) the batch- and split-invariant ones -- every product in fixed row tiles
(:mod:`kvgate.models.invariant_linear`), elementwise functions whose CPU kernels round a call's last
elements differently run over whole blocks (:mod:`kvgate.models.invariant_elementwise`) and top-k
ties go to the lowest index -- so that a token's bits never depend on the batch or on how a prompt
was split. What needs no care: row-wise norms and softmaxes, reductions over a few dims, and batched
products whose every batch element has one shape (measured invariant on torch 2.13's CPU kernels).
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch
import torch.nn.functional as F

from kvgate.models.invariant_elementwise import invariant
from kvgate.models.invariant_linear import invariant_einsum, invariant_linear


@attrs.frozen
class Arithmetic:
    exact: bool = False  # the deterministic mode

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``F.linear`` over ``x``'s last dim (any leading dims)."""
        if not self.exact:
            return F.linear(x, weight)
        return invariant_linear(x.reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], weight.shape[0])

    def einsum(self, equation: str, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """A per-row product: ``x``'s first dim is rows, ``weight`` has none."""
        return invariant_einsum(equation, x, weight) if self.exact else torch.einsum(equation, x, weight)

    def elementwise(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return invariant(fn, x) if self.exact else fn(x)

    def top_k(self, scores: torch.Tensor, k: int) -> torch.Tensor:
        """Indices [n, k] of each row's ``k`` largest scores, best first (exact: ties to the lowest index)."""
        if not self.exact:
            return scores.topk(k, dim=-1).indices
        return scores.sort(dim=-1, descending=True, stable=True).indices[:, :k]


PLAIN = Arithmetic()

"""A Gated DeltaNet layer's token mixing over a session's :class:`~.linear_state.LayerState`.

The input is projected to q/k/v (convolved together over the last ``kernel`` positions), an output
gate ``z``, beta and the decay's input; the delta rule (:mod:`.delta_rule`) runs per value head;
its output is RMS-normalised per head, gated by ``silu(z)`` and projected back.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from kvgate.models.qwen3_5.arch import Qwen35Arch
from kvgate.models.invariant_elementwise import invariant
from kvgate.models.qwen3_5.delta_rule import chunked, convolved, prepared, recurrent
from kvgate.models.qwen3_5.linear_state import LayerState
from kvgate.models.qwen3_5.weights import LinearAttention

Linear = Callable[[torch.Tensor, Any], torch.Tensor]  # a dense or packed weight (quant_linear)


def _gates(weights: LinearAttention, b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """[n, 2, heads] fp32: the log decay g and the write strength beta of each row."""
    g = -weights.decay_scale * invariant(F.softplus, a.float() + weights.dt_bias)
    return torch.stack([g, invariant(torch.sigmoid, b).float()], 1)


def _gated_norm(core: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """core and z [n, heads, v_dim] (runtime dtype): RMSNorm per head, then the gate ``silu(z)``."""
    normed = F.rms_norm(core.float(), (core.shape[-1],), eps=eps)  # rsqrt of few elements is not row-invariant
    return (weight * normed.to(core.dtype) * invariant(F.silu, z.float())).to(core.dtype)


class LinearMixer:
    """One linear-attention layer's prefill (one session) and decode (a batch of sessions)."""

    def __init__(self, arch: Qwen35Arch, weights: LinearAttention, linear: Linear, deterministic: bool):
        self.arch, self.weights, self.linear, self.deterministic = arch, weights, linear, deterministic

    def _inputs(self, x: torch.Tensor):
        arch, w = self.arch, self.weights
        z = self.linear(x, w.z).view(x.shape[0], arch.linear_v_heads, arch.linear_v_dim)
        return self.linear(x, w.qkv), z, _gates(w, self.linear(x, w.b), self.linear(x, w.a))

    def _prepared(self, rows: torch.Tensor, gates: torch.Tensor):
        arch = self.arch
        return prepared(rows, gates, arch.linear_k_heads, arch.linear_k_dim, arch.linear_v_heads)

    def _output(self, core: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        mixed = _gated_norm(core.to(z.dtype), z, self.weights.norm, self.arch.rms_eps)
        return self.linear(mixed.flatten(1), self.weights.out)

    def prefill(self, x: torch.Tensor, state: LayerState, start: int,
                wanted: Sequence[int]) -> tuple[torch.Tensor, LayerState, dict[int, LayerState]]:
        """The mixer's output for rows x at [start, start + n), the state after them, and the states at
        the positions in ``wanted`` that fall inside (start, start + n): at a chunk boundary read off
        the chunked pass, elsewhere the open chunk up to it solved again (:meth:`_inside_chunk`)."""
        n, size, keep = x.shape[0], self.arch.chunk_size, self.arch.conv_kernel - 1
        mixed, z, gates = self._inputs(x)
        history = torch.cat([state.conv, mixed])
        open_rows = torch.cat([state.rows, convolved(history, self.weights.conv)])
        open_gates = torch.cat([state.gates, gates])
        opened = state.rows.shape[0]
        core, states = chunked(*self._prepared(open_rows, open_gates), state.base, size)
        whole = open_rows.shape[0] // size
        new = LayerState(history[history.shape[0] - keep:].clone(), states[whole - 1] if whole else state.base,
                         open_rows[whole * size:].clone(), open_gates[whole * size:].clone(), states[-1])
        taken, origin = {}, start - opened  # origin: the position of open_rows[0], a chunk start
        for position in sorted(p for p in wanted if start < p < start + n):
            chunk, into = divmod(position - origin, size)
            conv = history[position - start:position - start + keep].clone()
            base = states[chunk - 1] if chunk else state.base
            taken[position] = (new.at_boundary(conv, base) if not into else
                               self._inside_chunk(conv, base, open_rows[chunk * size:chunk * size + into],
                                                  open_gates[chunk * size:chunk * size + into]))
        return self._output(core[opened:], z), new, taken

    def _inside_chunk(self, conv, base: torch.Tensor, rows: torch.Tensor, gates: torch.Tensor) -> LayerState:
        """The state inside a chunk, as a prefill ending there holds it: the open rows solved from
        ``base`` as one padded chunk (the same products as that prefill's last chunk)."""
        _, states = chunked(*self._prepared(rows, gates), base, self.arch.chunk_size)
        return LayerState(conv, base, rows.clone(), gates.clone(), states[-1])

    def decode(self, x: torch.Tensor, states: Sequence[LayerState]) -> tuple[torch.Tensor, list[LayerState]]:
        """One row per session: the mixer's outputs [B, hidden] and each session's new state."""
        mixed, z, gates = self._inputs(x)
        history = torch.cat([torch.stack([s.conv for s in states]), mixed[:, None]], 1)
        rows = convolved(history, self.weights.conv)[:, 0]
        if self.deterministic:  # the open chunk again, as a prefill computes it
            steps = [self._chunk_step(s, history[b, 1:], rows[b:b + 1], gates[b:b + 1])
                     for b, s in enumerate(states)]
            core = torch.stack([out for out, _ in steps])
            return self._output(core, z), [new for _, new in steps]
        core, current = recurrent(*self._prepared(rows, gates), torch.stack([s.current for s in states]))
        new = [self._appended(s, history[b, 1:], rows[b:b + 1], gates[b:b + 1], current[b])
               for b, s in enumerate(states)]
        return self._output(core, z), new

    def _chunk_step(self, state: LayerState, conv, row, gate) -> tuple[torch.Tensor, LayerState]:
        open_rows, open_gates = torch.cat([state.rows, row]), torch.cat([state.gates, gate])
        core, states = chunked(*self._prepared(open_rows, open_gates), state.base, self.arch.chunk_size)
        if open_rows.shape[0] == self.arch.chunk_size:
            return core[-1], state.at_boundary(conv, states[0])
        return core[-1], LayerState(conv, state.base, open_rows, open_gates, states[-1])

    def _appended(self, state: LayerState, conv, row, gate, current) -> LayerState:
        """The state after one recurrent step; a chunk it completes is solved whole for its ``base``."""
        open_rows, open_gates = torch.cat([state.rows, row]), torch.cat([state.gates, gate])
        if open_rows.shape[0] < self.arch.chunk_size:
            return LayerState(conv, state.base, open_rows, open_gates, current)
        _, states = chunked(*self._prepared(open_rows, open_gates), state.base, self.arch.chunk_size)
        return state.at_boundary(conv, states[0])

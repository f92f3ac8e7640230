"""What a session's linear-attention layers hold, and its snapshots.

Per linear layer a :class:`LayerState` at the session's length ``L``: the convolution's inputs of
the ``kernel - 1`` positions before ``L``; the recurrent state ``base`` at ``C = L - L % chunk_size``
(the start of the open chunk); the open chunk's convolved rows and gates ``[C, L)``; and the state
``current`` at ``L``, which decode reads. Prefill recomputes the open chunk from ``base`` with the new
rows, so a chunk is always computed whole from an aligned start (:mod:`.delta_rule`).

States are never written in place: an update makes new tensors, so forks and snapshots share them.
A snapshot is the tuple of every linear layer's state at one position, kept in ``session.aux``
under :data:`SNAPSHOTS`. Its size does not grow with the position: per linear layer
``v_heads * k_dim * v_dim`` fp32 twice (``base`` and ``current``, one tensor at a chunk boundary),
``(kernel - 1) * conv_dim`` inputs and fewer than ``chunk_size`` open rows (:func:`state_bytes`).

Message ends the host marks (:func:`mark_boundaries`) are taken as snapshots when a prefill passes
them. The first one a session holds (the end of the system prompt with the tools, where sibling
conversations part) is kept apart from the loose snapshots, so later ones never push it out.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

from kvgate.core.runtime import Session
from kvgate.models.qwen3_5.arch import Qwen35Arch

STATE = "qwen3_5_state"  # session.aux key: tuple[LayerState, ...] at the session's length
SNAPSHOTS = "qwen3_5_snapshots"  # session.aux key: {position: tuple[LayerState, ...]}
LOOSE_SNAPSHOTS = 4  # snapshots kept off the stride: the session's end and the 3 recorded last (ends of
# prompts and outputs, chunk ends of a backup, fork points remembered, message ends)
BOUNDARIES = "qwen3_5_boundaries"  # session.aux key: message ends ahead, to snapshot as the prefill passes them
FIRST_BOUNDARY = "qwen3_5_first_boundary"  # session.aux key: the position of the snapshot kept off the cap


@attrs.frozen
class LayerState:
    conv: torch.Tensor  # [kernel - 1, conv_dim], runtime dtype
    base: torch.Tensor  # [v_heads, k_dim, v_dim], fp32
    rows: torch.Tensor  # [open, conv_dim], runtime dtype
    gates: torch.Tensor  # [open, 2, v_heads], fp32: decay g and beta
    current: torch.Tensor  # [v_heads, k_dim, v_dim], fp32

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.conv, self.base, self.rows, self.gates, self.current

    def at_boundary(self, conv: torch.Tensor, state: torch.Tensor) -> "LayerState":
        """The state at a chunk boundary: nothing open, ``current`` is ``base``."""
        return LayerState(conv, state, self.rows[:0], self.gates[:0], state)


def initial(arch: Qwen35Arch, dtype: torch.dtype, device: torch.device) -> tuple[LayerState, ...]:
    """Every linear layer's state at position 0."""
    state = torch.zeros(arch.linear_v_heads, arch.linear_k_dim, arch.linear_v_dim, device=device)
    conv = torch.zeros(arch.conv_kernel - 1, arch.conv_dim, dtype=dtype, device=device)
    rows = torch.zeros(0, arch.conv_dim, dtype=dtype, device=device)
    gates = torch.zeros(0, 2, arch.linear_v_heads, device=device)
    return tuple(LayerState(conv, state, rows, gates, state) for _ in arch.linear_layers)


def held(session: Session) -> Optional[tuple[LayerState, ...]]:
    return session.aux.get(STATE)


def snapshots(session: Session) -> dict[int, tuple[LayerState, ...]]:
    return session.aux.setdefault(SNAPSHOTS, {})


def keep_snapshot(session: Session, position: int, states: tuple[LayerState, ...], stride: int) -> None:
    """Record the states at ``position``; of the snapshots off the stride the last one (the session's
    end) and the most recently recorded others are kept."""
    taken = snapshots(session)
    taken.pop(position, None)
    taken[position] = states  # the dict's order is the order of recording
    last, first_boundary = max(taken), session.aux.get(FIRST_BOUNDARY)
    loose = [p for p in taken if p % stride and p != last and p != first_boundary]
    for old in loose[:-(LOOSE_SNAPSHOTS - 1)]:
        del taken[old]


def mark_boundaries(session: Session, positions) -> None:
    """Snapshot, of the message ends past the session's length, the last ones the loose cap keeps
    beside the prompt's end and, while the session holds no first boundary's snapshot, the first."""
    ahead = sorted({int(p) for p in positions if p > session.length})
    chosen = set(ahead[-(LOOSE_SNAPSHOTS - 2):]) if ahead else set()
    if ahead and session.aux.get(FIRST_BOUNDARY) not in snapshots(session):
        session.aux[FIRST_BOUNDARY] = ahead[0]
        chosen.add(ahead[0])
    session.aux[BOUNDARIES] = sorted(chosen)


def boundaries_in(session: Session, start: int, end: int) -> list[int]:
    """The marked message ends inside a prefill of ``[start, end)`` (its end is kept anyway)."""
    return [p for p in session.aux.get(BOUNDARIES, ()) if start < p < end]


def inherit_first_boundary(fork: Session, source: Session) -> None:
    """``fork`` keeps ``source``'s first boundary apart too when it holds that snapshot."""
    position = source.aux.get(FIRST_BOUNDARY)
    if position is not None and position in snapshots(fork):
        fork.aux[FIRST_BOUNDARY] = position


def nearest(session: Session, position: int) -> tuple[int, Optional[tuple[LayerState, ...]]]:
    """The snapshot at or before ``position`` closest to it, ``(0, None)`` when there is none."""
    before = [p for p in snapshots(session) if p <= position]
    return (max(before), snapshots(session)[max(before)]) if before else (0, None)


def state_bytes(session: Session) -> int:
    """Bytes of the distinct tensors the session's state and snapshots hold (shared ones included)."""
    return sessions_state_bytes([session])


def sessions_state_bytes(sessions) -> int:
    """Bytes of the distinct tensors the sessions' states and snapshots hold, shared ones once."""
    seen: dict[int, int] = {}
    groups = {id(g): g for s in sessions for g in [held(s) or (), *list(s.aux.get(SNAPSHOTS, {}).values())]}
    for states in groups.values():  # forks share whole snapshots: each is walked once
        for layer in states:
            for t in layer.tensors():
                seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())

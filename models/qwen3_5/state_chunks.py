"""The auxiliary bytes of a Qwen3.5 chunk: every linear layer's :class:`~.linear_state.LayerState` at
the chunk's end ``E``, one layer after another, each tensor's raw bytes in C order: the convolution
inputs ``[kernel - 1, conv_dim]`` (runtime dtype), ``base`` ``[v_heads, k_dim, v_dim]`` (fp32), the
``E % chunk_size`` open rows ``[open, conv_dim]`` (runtime dtype) and their gates ``[open, 2,
v_heads]`` (fp32), and ``current`` (fp32). Sizes follow from the layout and ``E``: a chunk whose
bytes do not fit is refused."""

from __future__ import annotations

import math

import torch

from kvgate.models.qwen3_5.arch import Qwen35Arch
from kvgate.models.qwen3_5.linear_state import LayerState


def shapes(arch: Qwen35Arch, end: int) -> list[tuple[tuple[int, ...], bool]]:
    """(shape, in fp32) of each tensor of one layer's state at position ``end``."""
    opened, state = end % arch.chunk_size, (arch.linear_v_heads, arch.linear_k_dim, arch.linear_v_dim)
    return [((arch.conv_kernel - 1, arch.conv_dim), False), (state, True), ((opened, arch.conv_dim), False),
            ((opened, 2, arch.linear_v_heads), True), (state, True)]


def aux_bytes(arch: Qwen35Arch, end: int, element_size: int) -> int:
    one = sum(math.prod(shape) * (4 if fp32 else element_size) for shape, fp32 in shapes(arch, end))
    return one * len(arch.linear_layers)


def encode(states: tuple[LayerState, ...]) -> bytes:
    parts = [t.contiguous().cpu().view(torch.uint8).numpy().tobytes() for s in states for t in s.tensors()]
    return b"".join(parts)


def decode(data, arch: Qwen35Arch, end: int, dtype: torch.dtype, device: torch.device) -> tuple[LayerState, ...]:
    """The states of ``data`` at position ``end``; ``ValueError`` when its size does not fit."""
    element = torch.empty(0, dtype=dtype).element_size()
    expected = aux_bytes(arch, end, element)
    if len(data) != expected:
        raise ValueError(f"linear-attention state at position {end} must be {expected} bytes, got {len(data)}")
    raw, offset, states = bytearray(data), 0, []
    for _ in arch.linear_layers:
        tensors = []
        for shape, fp32 in shapes(arch, end):
            kind = torch.float32 if fp32 else dtype
            size = math.prod(shape) * (4 if fp32 else element)
            flat = torch.frombuffer(raw, dtype=torch.uint8, count=size, offset=offset) if size else torch.empty(
                0, dtype=torch.uint8)
            tensors.append(flat.view(kind).view(shape).clone().to(device))
            offset += size
        states.append(LayerState(*tensors))
    return tuple(states)

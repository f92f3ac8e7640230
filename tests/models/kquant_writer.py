"""A small GGUF K-quant encoder for tests (gguf-py cannot quantize K-types; the 32-weight types Q8_0,
Q4_0, Q4_1, Q5_0 and Q5_1 it encodes itself) for the tiny K-quant Llama GGUFs.

The encoding is any valid one, not llama.cpp's search: per 32 (Q4_K, Q5_K) or 16 (Q6_K) weights a
min/max (or absmax) scale, the block's scales in 6 (8) bits under one fp16 ``d`` (and ``dmin``)."""

from __future__ import annotations

import numpy as np


def _f16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def _bytes(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8).reshape(values.shape[0], -1)


def _levels(values: np.ndarray, step: np.ndarray, top: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint(values / step), 0)
    return np.clip(q, 0, top).astype(np.uint8)


def _scale_bytes(sc: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """The 12 bytes of eight 6-bit scales and mins [B, 8], as ggml packs them."""
    low = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    mid = mins[:, :4] | ((mins[:, 4:] >> 4) << 6)
    high = (sc[:, 4:] & 15) | ((mins[:, 4:] & 15) << 4)
    return np.concatenate([low, mid, high], 1).astype(np.uint8)


def _affine(blocks: np.ndarray, top: int):
    """Q4_K / Q5_K: (d, dmin, scale bytes, q [B, 8, 32]) of fp32 blocks [B, 256], q in 0..top."""
    subs = blocks.reshape(-1, 8, 32)
    low = np.minimum(subs.min(-1), 0)
    scale, minimum = (subs.max(-1) - low) / top, -low
    d, dmin = _f16(scale.max(-1) / 63), _f16(minimum.max(-1) / 63)
    sc = _levels(scale, d.astype(np.float32)[:, None], 63)
    mins = _levels(minimum, dmin.astype(np.float32)[:, None], 63)
    step = (d.astype(np.float32)[:, None] * sc)[..., None]
    offset = (dmin.astype(np.float32)[:, None] * mins)[..., None]
    return d, dmin, _scale_bytes(sc, mins), _levels(subs + offset, step, top)


def _nibble_bytes(q: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K low nibbles of q [B, 8, 32]: chunk c holds sub-blocks 2c (low) and 2c + 1 (high)."""
    return ((q[:, 0::2] & 15) | ((q[:, 1::2] & 15) << 4)).reshape(-1, 128)


def q4_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = _affine(blocks, 15)
    return np.concatenate([_bytes(d[:, None]), _bytes(dmin[:, None]), scales, _nibble_bytes(q)], 1)


def q5_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = _affine(blocks, 31)
    high = ((q >> 4) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(1).astype(np.uint8)
    return np.concatenate([_bytes(d[:, None]), _bytes(dmin[:, None]), scales, high, _nibble_bytes(q)], 1)


def q6_k(blocks: np.ndarray) -> np.ndarray:
    subs = blocks.reshape(-1, 16, 16)
    scale = np.abs(subs).max(-1) / 31
    d = _f16(scale.max(-1) / 127)
    sc = np.clip(np.rint(np.where(d[:, None] > 0, scale / d.astype(np.float32)[:, None], 0)), 0, 127).astype(np.int8)
    step = (d.astype(np.float32)[:, None] * sc)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step > 0, np.rint(subs / step), 0)
    u = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # halves, quarters k, l
    low = (u[:, :, :2] & 15) | ((u[:, :, 2:] & 15) << 4)  # [B, half, k % 2, l]
    high = ((u >> 4) << np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]).sum(2).astype(np.uint8)
    return np.concatenate([low.reshape(-1, 128), high.reshape(-1, 64), _bytes(sc), _bytes(d[:, None])], 1)


GGUF_PY_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # the 32-weight types gguf-py encodes itself


def quantize_rows(weight: np.ndarray, type_name: str) -> np.ndarray:
    """Raw rows uint8 [N, row bytes] of fp32 ``weight`` [N, K] in ``type_name``."""
    if type_name in GGUF_PY_TYPES:
        from gguf import GGMLQuantizationType
        from gguf.quants import quantize

        return quantize(weight.astype(np.float32), GGMLQuantizationType[type_name])
    encode = {"Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k}[type_name]
    rows = weight.shape[0]
    return encode(weight.astype(np.float32).reshape(-1, 256)).reshape(rows, -1)

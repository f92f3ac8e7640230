"""GGUF Q8_0 / Q4_K / Q5_K / Q6_K blocks as ggml lays them out, and their reference dequantization
(with the 32-weight Q4_0 / Q4_1 / Q5_0 / Q5_1 of :mod:`kvgate.models.gguf_kquant_legacy`).

Every block is little-endian bytes; ``fp16`` is an IEEE half. A row of ``K`` weights is ``K /
weights-per-block`` blocks back to back, so a tensor's raw rows are uint8 ``[N, K / w * bytes]``.

- **Q8_0**, 32 weights in 34 bytes: ``fp16 d``, then 32 int8 ``q``; ``w = q * d``.
- **Q4_K**, 256 weights in 144 bytes: ``fp16 d``, ``fp16 dmin``, 12 bytes of eight 6-bit scales
  ``sc`` and eight 6-bit mins ``m`` (one pair per 32 weights), 128 bytes of nibbles. Scale bytes:
  for ``j < 4`` byte ``j`` holds ``sc[j]`` in its low 6 bits and bits 4-5 of ``sc[j + 4]`` in its
  top 2; byte ``j + 4`` the same for ``m``; byte ``j + 8`` holds the low 4 bits of ``sc[j + 4]``
  (low nibble) and of ``m[j + 4]`` (high nibble). Nibble chunk ``c`` (32 bytes) holds sub-block
  ``2c`` in its low nibbles and ``2c + 1`` in its high ones. ``w = (d * sc) * q - (dmin * m)``.
- **Q5_K**, 256 weights in 176 bytes: ``d``, ``dmin``, the 12 scale bytes as Q4_K, 32 bytes of high
  bits (bit ``j`` of byte ``l`` is bit 4 of weight ``l`` of sub-block ``j``), then 128 bytes of low
  nibbles as Q4_K; ``q = low | high << 4`` (0..31), ``w`` as Q4_K.
- **Q6_K**, 256 weights in 210 bytes: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8
  scales (one per 16 weights), ``fp16 d`` last. Each half of 128 weights takes 64 low bytes and 32
  high bytes: its 32-weight quarter ``k`` reads low byte ``32 * (k % 2) + l`` (low nibble for ``k <
  2``, high for ``k >= 2``) and bits ``2k..2k+1`` of high byte ``l``; ``w = (d * scale) * (q - 32)``.

:func:`dequantize_rows` computes these in fp32 in the order gguf-py's ``gguf.quants.dequantize``
does (each product and difference rounded on its own, no fused multiply-add), so both give the same bits.
"""

from __future__ import annotations

import torch

from kvgate.models import gguf_kquant_legacy as legacy

QK_K = 256
# type name -> (weights per block, bytes per block)
BLOCKS = {"Q8_0": (32, 34), "Q4_K": (QK_K, 144), "Q5_K": (QK_K, 176), "Q6_K": (QK_K, 210), **legacy.BLOCKS}
TYPES = tuple(BLOCKS)


def row_bytes(type_name: str, cols: int) -> int:
    """Bytes of one row of ``cols`` weights (``cols`` a whole number of blocks)."""
    weights, size = BLOCKS[type_name]
    if cols % weights:
        raise ValueError(f"{type_name} rows take multiples of {weights} weights, not {cols}")
    return cols // weights * size


def row_weights(type_name: str, nbytes: int) -> int:
    """Weights in a row of ``nbytes`` raw bytes."""
    weights, size = BLOCKS[type_name]
    return nbytes // size * weights


def _half(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The fp16 at byte ``start`` of every block, as fp32 [B, 1]."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """Q4_K / Q5_K low nibbles [B, 128 bytes] as [B, 8 sub-blocks, 32]."""
    chunks = qs.reshape(-1, 4, 32)
    return torch.stack([chunks & 15, chunks >> 4], 2).reshape(-1, 8, 32)


def scales_and_mins(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The eight 6-bit scales and mins [B, 8] of Q4_K / Q5_K scale bytes [B, 12]."""
    d, m, m_d = scales.reshape(-1, 3, 4).unbind(1)
    sc = torch.cat([d & 63, (m_d & 15) | ((d >> 2) & 48)], -1)
    mins = torch.cat([m & 63, (m_d >> 4) | ((m >> 2) & 48)], -1)
    return sc, mins


def _scaled(blocks: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``(d * sc) * q - (dmin * m)`` of Q4_K / Q5_K blocks, q [B, 8, 32] as fp32."""
    sc, mins = scales_and_mins(blocks[:, 4:16])
    d = (_half(blocks, 0) * sc.float())[..., None]
    dm = (_half(blocks, 2) * mins.float())[..., None]
    return (d * q.float() - dm).reshape(-1, QK_K)


def q8_0(blocks: torch.Tensor) -> torch.Tensor:
    return blocks[:, 2:].contiguous().view(torch.int8).float() * _half(blocks, 0)


def q4_k(blocks: torch.Tensor) -> torch.Tensor:
    return _scaled(blocks, _nibbles(blocks[:, 16:]))


def q5_k(blocks: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.uint8)[None, :, None]
    high = (blocks[:, None, 16:48] >> shifts) & 1
    return _scaled(blocks, _nibbles(blocks[:, 48:]) | (high << 4))


def q6_k(blocks: torch.Tensor) -> torch.Tensor:
    low = blocks[:, :128].reshape(-1, 2, 1, 64)
    low = torch.cat([low & 15, low >> 4], 2).reshape(-1, 8, 32)
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8)[None, None, :, None]
    high = ((blocks[:, 128:192].reshape(-1, 2, 1, 32) >> shifts) & 3).reshape(-1, 8, 32)
    q = ((low | (high << 4)).to(torch.int8) - 32).reshape(-1, 16, 16).float()
    d = (_half(blocks, 208) * blocks[:, 192:208].contiguous().view(torch.int8).float())[..., None]
    return (d * q).reshape(-1, QK_K)


DEQUANTIZERS = {"Q8_0": q8_0, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k, **legacy.DEQUANTIZERS}


def dequantize_rows(raw: torch.Tensor, type_name: str) -> torch.Tensor:
    """fp32 [N, K] of raw rows uint8 [N, row bytes] of ``type_name``, bit for bit as ggml reads them."""
    if type_name not in BLOCKS:
        raise ValueError(f"unsupported GGUF quant type {type_name!r} (kept packed: {', '.join(TYPES)})")
    rows, nbytes = raw.shape
    blocks = raw.reshape(-1, BLOCKS[type_name][1])
    return DEQUANTIZERS[type_name](blocks).reshape(rows, row_weights(type_name, nbytes))

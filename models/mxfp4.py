"""MXFP4 checkpoints (gpt-oss's experts), dequantized at load to the runtime dtype.

``config.json`` declares them with ``quantization_config.quant_method = "mxfp4"``. A quantized
weight ``NAME`` is stored as two uint8 tensors: ``NAME_blocks`` ``[*prefix, rows, groups, 16]``,
each byte two FP4 e2m1 values (the low nibble first), and ``NAME_scales`` ``[*prefix, rows,
groups]``, one e8m0 exponent per group of 32 values (the scale is ``2 ** (byte - 127)``). A row
holds ``groups * 32`` values of one output feature; the dequantized ``NAME`` is stored the way
transformers' parameter is, rows last: ``[*prefix, groups * 32, rows]``.

Disk is untrusted: a blocks tensor without its scales (or the reverse), a wrong dtype or shape
is a load error naming the tensor.
"""

from __future__ import annotations

import itertools

import torch

GROUP = 32
BLOCKS, SCALES = "_blocks", "_scales"
E8M0_BIAS = 127


def e2m1_values() -> torch.Tensor:
    """The 16 FP4 e2m1 values by code: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0;
    exponent 0 is subnormal (0 or 0.5)."""
    values = []
    for code in range(16):
        sign = -1.0 if code & 0b1000 else 1.0
        exponent, mantissa = (code >> 1) & 0b11, code & 1
        magnitude = mantissa * 0.5 if exponent == 0 else 2.0 ** (exponent - 1) * (1 + mantissa / 2)
        values.append(sign * magnitude)
    return torch.tensor(values, dtype=torch.float32)


def dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 values ``[*prefix, rows, groups * 32]`` of MXFP4 ``blocks`` and their ``scales``."""
    table = e2m1_values().to(blocks.device)
    codes = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).long()  # low nibble first
    values = table[codes].flatten(-2)  # [*prefix, rows, groups, 32]
    exponents = scales.to(torch.int32) - E8M0_BIAS
    return torch.ldexp(values, exponents[..., None]).flatten(-2)


def declared(config: dict) -> bool:
    quant = config.get("quantization_config")
    return isinstance(quant, dict) and quant.get("quant_method") == "mxfp4"


def dequantize_checkpoint(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``tensors``, in place, with every ``NAME_blocks`` / ``NAME_scales`` pair replaced by ``NAME``
    in ``dtype`` (rows last, as transformers stores the dequantized parameter)."""
    for name in sorted(n for n in tensors if n.endswith(BLOCKS)):
        base = name.removesuffix(BLOCKS)
        blocks, scales = tensors.pop(name), tensors.pop(base + SCALES, None)
        _check(base, blocks, scales)
        tensors[base] = _rows_last(blocks, scales, dtype)
    stray = sorted(n for n in tensors if n.endswith(SCALES))  # every pair is gone by now
    if stray:
        raise ValueError(f"MXFP4 scales {stray[0]} have no {stray[0].removesuffix(SCALES) + BLOCKS} tensor")
    return tensors


def _rows_last(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ``dtype`` values ``[*prefix, groups * 32, rows]``, one expert (leading index) at a time so
    that the fp32 temporaries stay one expert's size."""
    *prefix, rows, groups, _ = blocks.shape
    out = torch.empty(*prefix, groups * GROUP, rows, dtype=dtype, device=blocks.device)
    for index in itertools.product(*map(range, prefix)):
        out[index] = dequantize(blocks[index], scales[index]).transpose(-1, -2)
    return out


def _check(base: str, blocks: torch.Tensor, scales) -> None:
    if scales is None:
        raise ValueError(f"MXFP4 weight {base + BLOCKS} has no {base + SCALES} tensor")
    for name, tensor in ((base + BLOCKS, blocks), (base + SCALES, scales)):
        if tensor.dtype != torch.uint8:
            raise ValueError(f"MXFP4 tensor {name} must be uint8, got {tensor.dtype}")
    if blocks.dim() < 3 or blocks.shape[-1] != GROUP // 2 or tuple(blocks.shape[:-1]) != tuple(scales.shape):
        raise ValueError(f"MXFP4 tensor {base + BLOCKS} has shape {tuple(blocks.shape)}, its scales "
                         f"{tuple(scales.shape)}: expected [..., rows, groups, {GROUP // 2}] and [..., rows, groups]")

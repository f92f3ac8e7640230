"""Block-scaled FP8 checkpoints (DeepSeek V3, V3.2, V4), dequantized at load to the runtime dtype.

``config.json`` declares them with ``quantization_config``: ``quant_method = "fp8"`` and
``weight_block_size = [bm, bn]`` (128 x 128 in DeepSeek's releases; absent: one scale per tensor).
A ``float8_e4m3fn`` weight ``[..., rows, cols]`` comes with its inverse scales
``[..., ceil(rows / bm), ceil(cols / bn)]`` named ``<base>.weight_scale_inv`` (V3, V3.2),
``<base>.scale`` (V4) for ``<base>.weight``, or ``<name>_scale_inv``: each value is multiplied by
the scale of its block (the last blocks of a row or column may be partial). With ``expert_dtype =
"fp4"`` (DeepSeek V4's experts) an ``int8`` weight ``[rows, cols / 2]`` packs two e2m1 values per
byte, low nibble first, with one scale per 32 values of a row: ``[rows, ceil(cols / 32)]``.
Scales are fp32 / bf16, ``float8_e8m0fnu`` (``scale_fmt = "ue8m0"``) or its raw exponent bytes.

Disk is untrusted: a quantized weight without its scale, a scale of the wrong shape or dtype, a
scale whose weight is not quantized, or an unknown quantization method is a load error naming it.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from kvgate.models import mxfp4

FP8 = torch.float8_e4m3fn
FP4_PACKED = tuple(t for t in (torch.int8, getattr(torch, "float4_e2m1fn_x2", None)) if t is not None)
FP4_GROUP = 32
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e8m0fnu, torch.uint8)


def dequantize_checkpoint(tensors: dict[str, torch.Tensor], config: dict[str, Any],
                          dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``tensors``, in place, with every quantized weight replaced by its ``dtype`` values and its scale
    dropped (in place so that each packed weight is freed as its values arrive)."""
    quant = config.get("quantization_config")
    # DeepSeek V4's config.json states expert_dtype at its top level, V4.1's in quantization_config
    fp4 = isinstance(quant, dict) and quant.get("expert_dtype", config.get("expert_dtype")) == "fp4"
    quantized = sorted(n for n, t in tensors.items() if t.dtype == FP8 or (fp4 and t.dtype in FP4_PACKED))
    if quant is None:
        if quantized:
            raise ValueError(f"weight {quantized[0]} is {tensors[quantized[0]].dtype} but config.json has no "
                             "quantization_config")
        return tensors
    if mxfp4.declared(config):  # gpt-oss's experts (kvgate.models.mxfp4)
        return mxfp4.dequantize_checkpoint(tensors, dtype)
    block = _block_size(quant)
    for name in quantized:
        scale_name = _scale_name(name, tensors)
        scale = tensors.pop(scale_name)
        tensors[name] = dequantize(name, tensors[name], scale_name, scale, block).to(dtype)
    _check_no_stray_scales(tensors)
    return tensors


def _block_size(quant: Any) -> Optional[tuple[int, int]]:
    if not isinstance(quant, dict) or quant.get("quant_method") != "fp8":
        method = quant.get("quant_method") if isinstance(quant, dict) else quant
        raise ValueError(f"config.json quantization_config: method {method!r} is not supported (only block-scaled "
                         "'fp8' and 'mxfp4' checkpoints are)")
    block = quant.get("weight_block_size")
    if block is None:
        return None
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ValueError("config.json quantization_config.weight_block_size must be two positive integers, "
                         f"got {block!r}")
    return block[0], block[1]


def _scale_name(name: str, tensors: dict[str, torch.Tensor]) -> str:
    base = name.removesuffix(".weight")
    candidates = [base + ".weight_scale_inv", base + ".scale"] if name.endswith(".weight") else []
    found = [c for c in candidates + [name + "_scale_inv"] if c in tensors]
    if not found:
        raise ValueError(f"quantized weight {name} ({tensors[name].dtype}) has no scale tensor "
                         f"({' or '.join(candidates + [name + '_scale_inv'])})")
    return found[0]


def dequantize(name: str, weight: torch.Tensor, scale_name: str, scale: torch.Tensor,
               block: Optional[tuple[int, int]]) -> torch.Tensor:
    """The fp32 values of one quantized weight (``name`` and ``scale_name`` only name errors)."""
    fp4 = weight.dtype != FP8
    blocked = fp4 or block is not None
    if blocked and weight.ndim < 2:
        raise ValueError(f"quantized weight {name} has shape {tuple(weight.shape)}: block scales need a matrix")
    if scale.dtype not in SCALE_DTYPES:
        raise ValueError(f"scale {scale_name} has dtype {scale.dtype}; expected fp32, bf16 or e8m0")
    values = unpack_fp4(weight) if fp4 else weight.float()
    factors = scale_values(scale)
    if not torch.isfinite(factors).all():
        raise ValueError(f"scale {scale_name} holds non-finite values")
    if not blocked:
        if scale.numel() != 1:
            raise ValueError(f"scale {scale_name} has shape {tuple(scale.shape)}; one scale per tensor needs one value")
        return values * factors.reshape(())
    rows, cols = values.shape[-2:]
    bm, bn = (1, FP4_GROUP) if fp4 else block
    grid = (*values.shape[:-2], -(-rows // bm), -(-cols // bn))
    if tuple(scale.shape) != grid:
        raise ValueError(f"scale {scale_name} has shape {tuple(scale.shape)}; weight {name} "
                         f"{tuple(values.shape)} in blocks of {bm}x{bn} needs {grid}")
    return values * factors.repeat_interleave(bm, -2)[..., :rows, :].repeat_interleave(bn, -1)[..., :cols]


def scale_values(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.uint8:  # e8m0 exponents stored as bytes
        return torch.pow(2.0, scale.float() - 127.0)
    return scale.float()


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Two e2m1 values per byte (low nibble first) as fp32, the last dim twice as wide."""
    table = torch.tensor(E2M1, dtype=torch.float32, device=packed.device)
    codes = packed.contiguous().view(torch.uint8).long()
    pairs = torch.stack([table[codes & 0xF], table[codes >> 4]], dim=-1)
    return pairs.reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def _check_no_stray_scales(tensors: dict[str, torch.Tensor]) -> None:
    for name in tensors:
        if name.endswith("_scale_inv"):
            weight = name.removesuffix("_scale_inv")
            raise ValueError(f"scale {name} has no quantized weight ({weight} is "
                             f"{tensors[weight].dtype if weight in tensors else 'missing'})")

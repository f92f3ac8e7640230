"""Block-scaled FP8 copies of tiny Hugging Face directories, as DeepSeek ships its checkpoints:
chosen linear weights stored as float8_e4m3fn with one fp32 inverse scale per block (a block's
largest magnitude maps to 448), the last blocks of a row or column partial when the block size does
not divide the shape, and ``quantization_config`` in config.json.

Quantization pads each weight to whole blocks; the reference dequantization walks the blocks one by
one -- neither shares code with :mod:`kvgate.models.fp8_blocks`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


def quantize(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [rows, cols] as float8 values and their per-block inverse scales."""
    (rows, cols), (bm, bn) = weight.shape, block
    grid = (-(-rows // bm), -(-cols // bn))
    padded = torch.zeros(grid[0] * bm, grid[1] * bn)
    padded[:rows, :cols] = weight.float()
    tiles = padded.view(grid[0], bm, grid[1], bn)
    inverse = (tiles.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    values = (tiles / inverse[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return values.view(grid[0] * bm, grid[1] * bn)[:rows, :cols].contiguous(), inverse


def reference_dequantize(values: torch.Tensor, inverse: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    out = torch.empty(values.shape)
    (bm, bn) = block
    for i in range(inverse.shape[0]):
        for j in range(inverse.shape[1]):
            tile = (slice(i * bm, (i + 1) * bm), slice(j * bn, (j + 1) * bn))
            out[tile] = values[tile].float() * inverse[i, j]
    return out


def write_fp8_copy(source: Path, target: Path, chosen: Callable[[str, torch.Tensor], bool], block: tuple[int, int],
                   scale_suffix: str = ".weight_scale_inv") -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Copy the directory ``source`` to ``target`` with the ``chosen`` ``*.weight`` tensors quantized,
    each scale saved as ``<base><scale_suffix>``; returns the stored (values, inverse scales) by name."""
    shutil.copytree(source, target)
    tensors = load_file(str(source / "model.safetensors"))
    stored = {}
    for name in [n for n, t in tensors.items() if n.endswith(".weight") and t.ndim == 2 and chosen(n, t)]:
        stored[name] = quantize(tensors[name], block)
        tensors[name] = stored[name][0]
        tensors[name.removesuffix(".weight") + scale_suffix] = stored[name][1]
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": list(block)}
    (target / "config.json").write_text(json.dumps(config))
    return stored


def write_dequantized(source: Path, target: Path, stored: dict[str, tuple[torch.Tensor, torch.Tensor]],
                      block: tuple[int, int]) -> None:
    """Copy the unquantized directory ``source`` to ``target`` with the stored weights replaced by
    their reference dequantization (an fp32 checkpoint of the FP8 one's values)."""
    shutil.copytree(source, target)
    tensors = load_file(str(source / "model.safetensors"))
    tensors.update({name: reference_dequantize(*pair, block) for name, pair in stored.items()})
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})


E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize_fp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` [rows, cols] as packed e2m1 pairs (int8, low nibble first) and one power-of-two
    scale per 32 values of a row (float8_e8m0fnu), as DeepSeek V4 ships its experts."""
    rows, cols = weight.shape
    groups = weight.float().view(rows, cols // 32, 32)
    scale = torch.exp2(torch.ceil(torch.log2((groups.abs().amax(-1) / 6.0).clamp(min=2.0 ** -126))))
    scaled = groups / scale[..., None]
    codes = (scaled.abs()[..., None] - E2M1).abs().argmin(-1) + 8 * (scaled < 0)
    codes = codes.view(rows, cols // 2, 2)
    packed = (codes[..., 0] | (codes[..., 1] << 4)).to(torch.uint8).view(torch.int8)
    return packed, scale.to(torch.float8_e8m0fnu)


def reference_dequantize_fp4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows, half = packed.shape
    out = torch.empty(rows, 2 * half)
    table = E2M1.tolist() + [-v for v in E2M1.tolist()]
    for r in range(rows):
        for c in range(half):
            byte = int(packed[r, c]) & 0xFF
            for k, code in enumerate((byte & 0xF, byte >> 4)):
                out[r, 2 * c + k] = table[code] * float(scale[r, (2 * c + k) // 32])
    return out

"""Whether a GGUF file's layers load packed: every layer matrix a dense projection in a kept type.

The weight format ``auto`` (:mod:`kvgate.models.weight_format`) keeps such a file's blocks
(:mod:`kvgate.models.gguf_kquant`) instead of dequantizing it to bf16. A layer matrix is any tensor
``blk.N.*`` of two or more dimensions; norms and biases are vectors and do not count. Only the header
and the tensor infos are read (name, u32 dims, u64 sizes, u32 ggml type, u64 offset each), not the data.
"""

from __future__ import annotations

import re
import struct
from typing import BinaryIO, Iterator

from kvgate.models.gguf_header import read_counts, read_exact, read_string, read_value
from kvgate.models.gguf_kquant import TYPES

PROJECTION = re.compile(r"blk\.\d+\.(attn_[qkv]|attn_output|ffn_gate|ffn_up|ffn_down)\.weight")
MAX_DIMS = 4


def tensor_infos(path: str) -> Iterator[tuple[str, int, int]]:
    """``(name, dims, ggml type id)`` of every tensor of the GGUF at ``path``."""
    with open(path, "rb") as handle:
        tensors, pairs = read_counts(handle, path)
        for _ in range(pairs):
            read_string(handle)
            read_value(handle, struct.unpack("<I", read_exact(handle, 4))[0])
        for _ in range(tensors):
            yield _tensor_info(handle)


def _tensor_info(handle: BinaryIO) -> tuple[str, int, int]:
    name = read_string(handle)
    (dims,) = struct.unpack("<I", read_exact(handle, 4))
    if dims > MAX_DIMS:
        raise ValueError(f"GGUF tensor {name!r} has {dims} dimensions")
    handle.seek(8 * dims, 1)
    (type_id,) = struct.unpack("<I", read_exact(handle, 4))
    handle.seek(8, 1)
    return name, dims, type_id


def packed_gguf_layers(path: str) -> bool:
    """True when the GGUF at ``path`` has layer matrices and each is a dense projection of a type in
    :data:`~kvgate.models.gguf_kquant.TYPES`; ValueError for a file that is not a readable GGUF."""
    from gguf import GGMLQuantizationType

    kept = {GGMLQuantizationType[name].value for name in TYPES}
    matrices = [(name, type_id) for name, dims, type_id in tensor_infos(path) if name.startswith("blk.") and dims >= 2]
    return bool(matrices) and all(PROJECTION.fullmatch(name) and type_id in kept for name, type_id in matrices)

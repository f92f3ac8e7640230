"""GGUF block-quantized tensors (:data:`~kvgate.models.gguf_kquant.TYPES`) in a converted directory:
their raw rows, kept packed.

A tensor ``X`` kept this way is stored as one uint8 tensor ``X.kq_<TYPE>`` ([N, row bytes], the
file's own blocks, :mod:`kvgate.models.gguf_kquant`; for Llama's q/k, whole rows in Hugging Face
order). :func:`gather_kquant` turns it back into ``X``: a
:class:`~kvgate.models.gguf_kquant_weight.KQuantWeight`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from kvgate.models.gguf_kquant import TYPES
from kvgate.models.gguf_kquant_weight import KQuantWeight

SUFFIX = ".kq_"


def stored_kquant(name: str, raw_rows: np.ndarray, type_name: str) -> dict[str, torch.Tensor]:
    """The converted-directory tensor of ``name``'s raw rows (uint8 [N, row bytes])."""
    if type_name not in TYPES:
        raise ValueError(f"{type_name} tensors are not kept packed (kept: {', '.join(TYPES)})")
    return {name + SUFFIX + type_name: torch.from_numpy(np.array(raw_rows, dtype=np.uint8, order="C"))}


def gather_kquant(tensors: dict[str, Any]) -> dict[str, Any]:
    """``tensors`` with every ``X.kq_<TYPE>`` replaced by ``X``: a :class:`KQuantWeight`."""
    out: dict[str, Any] = {}
    for name, tensor in tensors.items():
        base, _, type_name = name.rpartition(SUFFIX)
        if base and type_name in TYPES:
            out[base] = KQuantWeight(tensor, type_name)
        else:
            out[name] = tensor
    return out

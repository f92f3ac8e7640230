"""A cheap fingerprint of a loaded model: architecture, dtype, weight format (with the K-quant kernel's
arithmetic and variant where GGUF K-quant blocks are kept) and a digest of every weight tensor.

Each tensor contributes its shape, its fp64 sum and absolute sum and a strided sample of values,
so any realistic change to the weights changes the fingerprint without hashing every byte.
"""

from __future__ import annotations

import hashlib
import json

import attrs
import torch

from kvgate.models.gguf_kquant_weight import kernel_arithmetic

SAMPLES_PER_TENSOR = 257


def tensor_digest(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().reshape(-1)
    step = max(1, flat.numel() // SAMPLES_PER_TENSOR)
    sample = flat[::step].to(torch.float64).cpu()
    stats = torch.stack([flat.sum(dtype=torch.float64), flat.abs().sum(dtype=torch.float64)]).cpu()
    return repr(tuple(tensor.shape)).encode() + stats.numpy().tobytes() + sample.numpy().tobytes()


def weights_fingerprint(arch, weights, dtype: torch.dtype) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps(attrs.asdict(arch), sort_keys=True, default=str).encode())
    digest.update(str(dtype).encode())
    fmt = getattr(weights, "format", "bf16")
    if fmt != "bf16":  # dense weights hash as they always did, so their saved caches stay valid
        digest.update(f"weights={fmt}".encode())
    if fmt.endswith("+kquant"):  # GGUF K-quant blocks: the arithmetic and variant that multiply them
        digest.update(f"kquant={kernel_arithmetic()}".encode())
    for tensor in weights.named_tensors():
        digest.update(tensor_digest(tensor))
    return digest.hexdigest()[:32]


def runtime_fingerprint(arch, weights, dtype: torch.dtype, deterministic: bool, arithmetic: str) -> str:
    """The fingerprint of a runtime's state: its weights', plus the arithmetic that wrote the state,
    so state of one mode never serves the other (the invariant attention; ``arithmetic``, the
    forward's own kernels: the CPU RMSNorm kernel, the native layer)."""
    return state_fingerprint(weights_fingerprint(arch, weights, dtype), deterministic, arithmetic)


def state_fingerprint(weights_print: str, deterministic: bool, arithmetic: str) -> str:
    """:func:`runtime_fingerprint` from a :func:`weights_fingerprint` taken earlier."""
    return weights_print + ("/invariant-flash" if deterministic else "") + arithmetic

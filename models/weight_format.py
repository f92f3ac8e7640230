"""The weight format a model runs in: ``[model] weights`` resolved for its source, dtype and device.

``bf16`` keeps every weight dense in ``model.dtype`` (the name of the unquantized format);
``int8`` and ``int4`` hold the linear layers quantized (:mod:`kvgate.models.quant_linear`); they run
torch's CPU kernels on bf16 activations, so they need ``device`` cpu and ``dtype`` bf16. ``auto``
picks the fastest format measured for the device (``bench/bench_weights.py``): int4 for a Q4_0 / Q4_1
GGUF on CPU in bf16 (its own 4-bit weights, about twice bf16's decode speed, perplexity within
0.5 %), and for a GGUF whose every layer matrix is a dense projection in a type kept packed
(:mod:`kvgate.models.gguf_kquant`: a Q4_K_M, Q5_K_M, Q6_K, Q8_0 or Q5_0 file), whose blocks then stay
as the file holds them (no bf16 copy); else bf16 (quantizing a dense checkpoint trades accuracy: opt
in with int8 / int4). A file with other layer matrices (experts, a hybrid's) stays bf16 on auto.
"""

from __future__ import annotations

import torch

from kvgate.core.config import ModelConfig
from kvgate.core.runtime import ModelSource
from kvgate.models.gguf_header import read_header_value
from kvgate.models.gguf_packed_layers import packed_gguf_layers

Q4_FILE_TYPES = {2, 3}  # llama.cpp's MOSTLY_Q4_0, MOSTLY_Q4_1: their linear weights map onto int4 exactly


def is_packed_gguf(source: ModelSource) -> bool:
    """Whether ``source`` is a GGUF whose layer matrices all load packed (:func:`packed_gguf_layers`)."""
    try:
        return source.kind == "gguf" and packed_gguf_layers(source.path)
    except (OSError, ValueError):
        return False


def is_q4_gguf(source: ModelSource) -> bool:
    try:
        return source.kind == "gguf" and read_header_value(source.path, "general.file_type") in Q4_FILE_TYPES
    except (OSError, ValueError):
        return False


def resolve_weights(model_config: ModelConfig, source: ModelSource, device: torch.device,
                    quantizable: bool = True) -> str:
    """``model.weights`` made concrete; ``quantizable``: the architecture's runtime holds quantized
    weights (a ValueError names what rules an explicit int8/int4 out)."""
    wanted = model_config.weights
    if wanted == "bf16":
        return "bf16"
    blockers = [reason for reason, applies in [
        (f'device "{device.type}" (they run on cpu only)', device.type != "cpu"),
        (f'dtype "{model_config.dtype}" (they need bf16)', model_config.dtype != "bf16"),
        ("this architecture (its runtime keeps dense weights)", not quantizable)] if applies]
    if wanted == "auto":
        return "int4" if not blockers and (is_q4_gguf(source) or is_packed_gguf(source)) else "bf16"
    if blockers:
        raise ValueError(f'[model] weights = "{wanted}" is not available with ' + "; ".join(blockers))
    return wanted

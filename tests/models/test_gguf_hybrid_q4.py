"""A hybrid GGUF (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) whose projections are Q4_1 stays 4-bit packed
with ``[model] weights = "int4"``: its blocks' nibbles, scales and zeros go through the value heads'
reorders (rows; ``ssm_out``'s columns a head at a time) into the runtime's int4 weights, never
dequantized to bf16 on the way.

The equality that holds exactly: the projections are first snapped to a Q4_1 grid whose every
group of 32 spans exactly 16 steps (its min and max are on it) of a power-of-two scale
(:func:`snap_to_q4_grid`). Then a block's ``d * q + m`` is exact in fp32 and in bf16, and int4's
min/max quantization of that dense weight finds the very same scale, zero and nibbles. So the
packed load must equal, bit for bit (every weight tensor, the logits, greedy tokens), the same
file dequantized to bf16 (``convert_gguf`` with int4 off) and then quantized to int4 at load. A
nibble row or scale column reordered wrongly breaks the equality; a requantized weight would pass
it too, so the converted directory is checked to hold the 4-bit parts (``X.q4``) themselves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from kvgate.models.gguf_hybrid_q4 import KEPT
from kvgate.models.gguf_loader import convert_gguf
from kvgate.models.progress import Progress
from kvgate.models.quant_linear import Int4Weight
from kvgate.models.qwen3_5.quantize import FULL_FIELDS, LAYER_FIELDS, LINEAR_FIELDS, SHARED_FIELDS
from tests.models.tiny_gguf_hybrid import write_tiny_hybrid_gguf
from tests.models.tiny_models import VOCAB
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(11)).tolist()
INT4_BYTES_PER_WEIGHT = 0.625  # half a byte of nibble, a bf16 scale and zero per 32: Q4_1's own 20 / 32


def snap_to_q4_grid(directory) -> None:
    """Every 2-D weight but the embedding and head (columns in 32s) as ``m + d * q``: ``d`` a power of
    two, ``q`` 0..15 with both ends taken in each group of 32 (so Q4_1 and int4 recover ``d``, ``m``)."""
    tensors = load_file(str(directory / "model.safetensors"))
    for name, value in tensors.items():
        if value.ndim != 2 or value.shape[1] % 32 or "embed" in name or "lm_head" in name:
            continue
        groups = value.reshape(value.shape[0], -1, 32).astype(np.float64)
        low, high = groups.min(-1, keepdims=True), groups.max(-1, keepdims=True)
        step = 2.0 ** np.floor(np.log2(np.maximum(high - low, 1e-6) / 15))
        base = np.floor(low / step) * step
        q = np.clip(np.round((groups - base) / step), 0, 15)
        q[..., 0], q[..., 1] = 0, 15
        tensors[name] = (base + step * q).astype(np.float32).reshape(value.shape)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def q4_1_projections(name: str, values: np.ndarray):
    from gguf import GGMLQuantizationType

    kind = name.split(".")[2] if name.startswith("blk.") else ""
    return GGMLQuantizationType.Q4_1 if kind in KEPT and values.ndim == 2 and values.shape[1] % 32 == 0 else None


def weight_fields(runtime) -> dict[str, object]:
    """The layers' projections (those the hybrid quantize step packs) by ``layer.part.field``."""
    out = {}
    for index, layer in enumerate(runtime.forward.weights.layers):
        for name, part, fields in (("mlp", layer, LAYER_FIELDS), ("linear", layer.linear, LINEAR_FIELDS),
                                   ("full", layer.full, FULL_FIELDS), ("shared", layer.shared, SHARED_FIELDS)):
            for field in fields if part is not None else ():
                if getattr(part, field) is not None:
                    out[f"{index}.{name}.{field}"] = getattr(part, field)
    return out


CASES = [("qwen3_5_text", 32), ("qwen3_5_moe_text", 32), ("qwen3_next", 32), ("qwen3_5_text", 16)]


@pytest.mark.parametrize("model_type, v_dim", CASES)
def test_a_q4_1_hybrid_gguf_loads_packed_and_equals_its_bf16_then_int4_load(tmp_path, model_type, v_dim):
    hf = tmp_path / "hf"
    hf.mkdir()
    build_tiny_qwen3_5(hf, seed=5, model_type=model_type, linear_key_head_dim=16, linear_value_head_dim=v_dim)
    snap_to_q4_grid(hf)
    path = write_tiny_hybrid_gguf(hf, tmp_path / "tiny.gguf", q4_1_projections)
    packed = load_tiny_qwen3_5(path, dtype="bf16", weights="int4", cache_dir=tmp_path / "cache")
    dense = tmp_path / "dense"
    dense.mkdir()
    convert_gguf(str(path), dense, torch.bfloat16, Progress("dense"), int4=False)
    requantized = load_tiny_qwen3_5(dense, dtype="bf16", weights="int4")

    (converted,) = [d for d in (tmp_path / "cache").iterdir() if d.is_dir()]
    with safe_open(str(converted / "model.safetensors"), framework="pt") as handle:
        kept = {name.removesuffix(".q4") for name in handle.keys() if name.endswith(".q4")}
    linear = next(i for i, layer in enumerate(packed.forward.weights.layers) if layer.linear is not None)
    p = f"model.layers.{linear}.linear_attn."
    expected_kept = {p + "in_proj_qkv.weight", p + "in_proj_z.weight", p + "in_proj_b.weight"}
    assert expected_kept <= kept and (p + "out_proj.weight" in kept) == (v_dim % 32 == 0), sorted(kept)

    fields, reference = weight_fields(packed), weight_fields(requantized)
    assert fields.keys() == reference.keys()
    for name, weight in fields.items():
        other = reference[name]
        assert type(weight) is type(other), name
        if Int4Weight.fits(weight.shape):
            assert isinstance(weight, Int4Weight), name
        tensors = weight.tensors() if isinstance(weight, Int4Weight) else [weight]
        others = other.tensors() if isinstance(other, Int4Weight) else [other]
        assert all(torch.equal(a, b) for a, b in zip(tensors, others)), name
    linear_weights = packed.forward.weights.layers[linear].linear
    assert all(isinstance(w, Int4Weight) for w in (linear_weights.qkv, linear_weights.z, linear_weights.out))

    packed_weights = [w for w in fields.values() if isinstance(w, Int4Weight)]
    held = sum(t.numel() * t.element_size() for w in packed_weights for t in w.tensors())
    assert held <= INT4_BYTES_PER_WEIGHT * sum(w.shape.numel() for w in packed_weights)

    logits = packed.prefill(packed.new_session(), PROMPT, all_logits=True)
    expected = requantized.prefill(requantized.new_session(), PROMPT, all_logits=True)
    assert expected.float().std() > 0.01 and torch.equal(logits, expected)

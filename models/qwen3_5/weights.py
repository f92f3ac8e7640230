"""Qwen3.5, Qwen3.5-MoE and Qwen3-Next weights as the runtime holds them, read from a checkpoint's tensors.

Projections take the runtime dtype (``[model] weights`` int8 / int4 packs them once read:
:mod:`.quantize`). The zero-centred RMSNorm weights are held as their scale
``1 + weight`` in fp32 (transformers multiplies in fp32); ``A_log`` and ``dt_bias`` are rounded to the
runtime dtype, then held in fp32 (as transformers computes the decay). A
``Qwen3_5ForConditionalGeneration`` checkpoint's language model is read from under
``model.language_model.``; its vision tower (``model.visual.``) is left, and so is an MTP layer (``mtp.``)
unless it drafts (``[engine] speculative = "mtp"``: :mod:`.mtp_weights` reads it).
Qwen3-Next fuses a linear layer's projections per key head (:func:`split_fused_projections`): they
are split into Qwen3.5's, so both compute the same way.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

import attrs
import torch

from kvgate.models.gguf_quant import cat_rows
from kvgate.models.moe.weights import MoeWeights, read_moe
from kvgate.models.qwen3_5.arch import LINEAR, Qwen35Arch
from kvgate.models.quant_linear import Int4Weight, Int8Weight

log = logging.getLogger("kvgate")
QUANTIZED = (Int4Weight, Int8Weight)
LEFT = ("model.visual.", "mtp.")  # checkpoint parts the main model leaves (the MTP layer: .mtp_weights)


@attrs.define
class LinearAttention:
    qkv: torch.Tensor  # [conv_dim, hidden]: q, k, v projections, convolved together
    z: torch.Tensor  # [v_heads * v_dim, hidden]: the output gate
    b: torch.Tensor  # [v_heads, hidden]: beta (write strength) before its sigmoid
    a: torch.Tensor  # [v_heads, hidden]: the decay's input
    conv: torch.Tensor  # [conv_dim, kernel], runtime dtype
    decay_scale: torch.Tensor  # exp(A_log) [v_heads], fp32
    dt_bias: torch.Tensor  # [v_heads], fp32
    norm: torch.Tensor  # [v_dim], runtime dtype (a plain RMSNorm weight, multiplied before the gate)
    out: torch.Tensor  # [hidden, v_heads * v_dim]


@attrs.define
class FullAttention:
    q: torch.Tensor  # [heads * 2 * head_dim, hidden]: per head its query, then its output gate
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    q_norm: torch.Tensor  # [head_dim] scale, fp32
    k_norm: torch.Tensor


@attrs.define
class SharedExpert:
    """Qwen3.5-MoE's shared expert, its output scaled by ``sigmoid(gate . x)``."""

    gate_up: torch.Tensor  # [2 * width, hidden]
    down: torch.Tensor
    gate: torch.Tensor  # [1, hidden]


@attrs.define
class Layer:
    attn_norm: torch.Tensor  # [hidden] scale, fp32
    mlp_norm: torch.Tensor
    gate_up: Optional[torch.Tensor]  # [2 * intermediate, hidden]; None in a MoE layer
    down: Optional[torch.Tensor]
    linear: Optional[LinearAttention] = None
    full: Optional[FullAttention] = None
    moe: Optional[MoeWeights] = None
    shared: Optional[SharedExpert] = None


@attrs.define
class Qwen35Weights:
    embed: torch.Tensor
    layers: list[Layer]
    norm: torch.Tensor  # scale, fp32
    lm_head: torch.Tensor
    format: str = "bf16"  # dense weights (the fingerprint's convention for unquantized ones)

    def named_tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.norm, *_weight_tensors(self.lm_head)]
        for layer in self.layers:
            for part in (layer, layer.linear, layer.full, layer.shared):
                if part is not None:
                    out += [t for v in attrs.astuple(part, recurse=False) for t in _weight_tensors(v)]
            out += layer.moe.tensors() if layer.moe is not None else []
        return out


def _weight_tensors(value) -> list[torch.Tensor]:
    """A field's tensors: itself, a packed weight's parts (:mod:`kvgate.models.quant_linear`), or none."""
    if isinstance(value, torch.Tensor):
        return [value]
    return value.tensors() if isinstance(value, QUANTIZED) else []


def language_model_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's tensors under ``Qwen3_5ForCausalLM`` names, the rest left (and said so)."""
    left = sorted(name for name in tensors if name.startswith(LEFT))
    if left:
        log.info("Qwen3.5: serving the language model; %d tensors of its vision tower / MTP layer are left "
                 "unloaded unless [engine] speculative = \"mtp\" drafts with the MTP layer (%s, ...)", len(left), left[0])
    out = {}
    for name, tensor in tensors.items():
        if name.startswith(LEFT):
            continue
        out[name.replace("model.language_model.", "model.", 1)] = tensor
    return out


def split_fused_projections(arch: Qwen35Arch, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Qwen3-Next's ``in_proj_qkvz`` (per key head: its q, k, then the v and z of its value heads) and
    ``in_proj_ba`` (per key head: its value heads' b, then a) as Qwen3.5's ``in_proj_qkv``,
    ``in_proj_z``, ``in_proj_b`` and ``in_proj_a``."""
    out, k_heads, hidden = dict(tensors), arch.linear_k_heads, arch.hidden_size
    group = arch.linear_v_heads // k_heads
    widths = [arch.linear_k_dim, arch.linear_k_dim, group * arch.linear_v_dim, group * arch.linear_v_dim]
    for name in [n for n in tensors if n.endswith(".linear_attn.in_proj_qkvz.weight")]:
        p = name.removesuffix("in_proj_qkvz.weight")
        q, k, v, z = _per_key_head(out.pop(name), name, k_heads, widths, hidden)
        b, a = _per_key_head(out.pop(p + "in_proj_ba.weight", torch.empty(0)), p + "in_proj_ba.weight", k_heads,
                             [group, group], hidden)
        out[p + "in_proj_qkv.weight"] = torch.cat([q, k, v])
        out.update({p + "in_proj_z.weight": z, p + "in_proj_b.weight": b, p + "in_proj_a.weight": a})
    return out


def _per_key_head(fused: torch.Tensor, name: str, k_heads: int, widths: list[int], hidden: int):
    if tuple(fused.shape) != (k_heads * sum(widths), hidden):
        raise ValueError(f"tensor {name!r} has shape {tuple(fused.shape)}, expected {(k_heads * sum(widths), hidden)}")
    return [part.reshape(-1, hidden) for part in fused.view(k_heads, sum(widths), hidden).split(widths, 1)]


def tensor_readers(tensors: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device, owner: str,
                   shown: Callable[[str], str] = str, kind: str = ""):
    """``(take, scale)`` over ``tensors``: ``take(name, shape, as_dtype=dtype)`` a tensor checked for its
    shape, rounded to ``dtype`` and held as ``as_dtype`` on ``device``; ``scale(name, width)`` a
    zero-centred norm's fp32 ``1 + w``. Errors say ``"{owner} lacks tensor {shown(name)!r}"`` and
    ``"{kind}tensor {name!r} has shape ..."``."""

    def take(name: str, shape: tuple[int, ...], as_dtype: torch.dtype = dtype) -> torch.Tensor:
        if name not in tensors:
            raise ValueError(f"{owner} lacks tensor {shown(name)!r}")
        tensor = tensors[name]
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{kind}tensor {name!r} has shape {tuple(tensor.shape)}, expected {shape}")
        return tensor.to(dtype).to(as_dtype).to(device).contiguous()

    def scale(name: str, width: int) -> torch.Tensor:
        return take(name, (width,), torch.float32) + 1.0

    return take, scale


def read_weights(arch: Qwen35Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> Qwen35Weights:
    """The runtime's weights of a checkpoint's tensors (shapes checked against ``arch``)."""
    tensors = language_model_tensors(tensors)
    if arch.architecture == "qwen3_next":
        tensors = split_fused_projections(arch, tensors)

    take, scale = tensor_readers(tensors, dtype, device, "Qwen3.5 checkpoint")
    hidden = arch.hidden_size
    embed = take("model.embed_tokens.weight", (arch.vocab_size, hidden))
    head = embed if arch.tie_embeddings and "lm_head.weight" not in tensors else take(
        "lm_head.weight", (arch.vocab_size, hidden))
    layers = [_layer(arch, i, take, scale, tensors) for i in range(arch.layers)]
    return Qwen35Weights(embed, layers, scale("model.norm.weight", hidden), head)


def _layer(arch: Qwen35Arch, index: int, take, scale, tensors) -> Layer:
    p, hidden = f"model.layers.{index}.", arch.hidden_size
    layer = Layer(scale(p + "input_layernorm.weight", hidden), scale(p + "post_attention_layernorm.weight", hidden),
                  *_dense_mlp(arch, index, p + "mlp.", take))
    if arch.sparse(index):
        layer.moe, layer.shared = _moe(arch, p + "mlp.", take, tensors)
    if arch.kinds[index] == LINEAR:
        layer.linear = _linear_attention(arch, p + "linear_attn.", take)
    else:
        q, kv, d = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim, arch.head_dim
        a = p + "self_attn."
        layer.full = FullAttention(take(a + "q_proj.weight", (2 * q, hidden)), take(a + "k_proj.weight", (kv, hidden)),
                                   take(a + "v_proj.weight", (kv, hidden)), take(a + "o_proj.weight", (hidden, q)),
                                   scale(a + "q_norm.weight", d), scale(a + "k_norm.weight", d))
    return layer


def _dense_mlp(arch: Qwen35Arch, index: int, p: str, take) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    if arch.sparse(index):
        return None, None
    hidden, width = arch.hidden_size, arch.intermediate_size
    gate_up = cat_rows([take(p + "gate_proj.weight", (width, hidden)), take(p + "up_proj.weight", (width, hidden))])
    return gate_up, take(p + "down_proj.weight", (hidden, width))


def _moe(arch: Qwen35Arch, p: str, take, tensors) -> tuple[MoeWeights, SharedExpert]:
    def any_shape(name: str) -> torch.Tensor:
        return take(name, tuple(tensors[name].shape) if name in tensors else ())

    moe = read_moe(any_shape, tensors.__contains__, p, arch.moe)
    moe.check_shapes(arch.moe, arch.hidden_size)
    hidden, width = arch.hidden_size, arch.shared_expert_size
    s = p + "shared_expert."
    gate_up = cat_rows([take(s + "gate_proj.weight", (width, hidden)), take(s + "up_proj.weight", (width, hidden))])
    return moe, SharedExpert(gate_up, take(s + "down_proj.weight", (hidden, width)),
                             take(p + "shared_expert_gate.weight", (1, hidden)))


def _linear_attention(arch: Qwen35Arch, p: str, take) -> LinearAttention:
    hidden, heads, value = arch.hidden_size, arch.linear_v_heads, arch.linear_v_heads * arch.linear_v_dim
    conv = take(p + "conv1d.weight", (arch.conv_dim, 1, arch.conv_kernel))[:, 0].contiguous()
    return LinearAttention(
        qkv=take(p + "in_proj_qkv.weight", (arch.conv_dim, hidden)), z=take(p + "in_proj_z.weight", (value, hidden)),
        b=take(p + "in_proj_b.weight", (heads, hidden)), a=take(p + "in_proj_a.weight", (heads, hidden)), conv=conv,
        decay_scale=take(p + "A_log", (heads,), torch.float32).exp(), dt_bias=take(p + "dt_bias", (heads,), torch.float32),
        norm=take(p + "norm.weight", (arch.linear_v_dim,)), out=take(p + "out_proj.weight", (hidden, value)))

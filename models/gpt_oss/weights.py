"""The tensors of a gpt-oss model, read from Hugging Face names (MXFP4 experts arrive dequantized,
see :mod:`kvgate.models.mxfp4`).

Stored for the forward: q/k/v fused into one ``qkv`` matrix and bias; each layer's experts as
``gate_up`` ``[experts, 2 * width, hidden]`` (the gate rows, then the up rows: the checkpoint
interleaves them, gate at even columns) and ``down`` ``[experts, hidden, width]``, with their
biases. Norm weights, sinks and the router stay fp32, as transformers keeps its norms.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

from kvgate.models.gpt_oss.arch import GptOssArch


@attrs.define
class GptOssLayer:
    attn_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: Optional[torch.Tensor]
    o: torch.Tensor
    o_bias: Optional[torch.Tensor]
    sinks: torch.Tensor  # [heads] fp32: each head's logit in its softmax's denominator
    mlp_norm: torch.Tensor
    router: torch.Tensor  # [experts, hidden] fp32
    router_bias: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor
    down: torch.Tensor
    down_bias: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in attrs.astuple(self, recurse=False) if t is not None]


@attrs.define
class GptOssWeights:
    embed: torch.Tensor
    layers: list[GptOssLayer]
    norm: torch.Tensor
    lm_head: torch.Tensor

    def named_tensors(self) -> list[torch.Tensor]:
        return [self.embed, self.norm, self.lm_head] + [t for layer in self.layers for t in layer.tensors()]


def read_weights(arch: GptOssArch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> GptOssWeights:
    def take(name: str, as_dtype: torch.dtype = dtype) -> torch.Tensor:
        if name not in tensors:
            raise ValueError(f"weights are missing tensor {name!r}")
        return tensors[name].to(device=device, dtype=as_dtype)

    embed = take("model.embed_tokens.weight")
    head = embed if arch.tie_embeddings or "lm_head.weight" not in tensors else take("lm_head.weight")
    weights = GptOssWeights(embed=embed, layers=[_layer(arch, take, i) for i in range(arch.layers)],
                            norm=take("model.norm.weight", torch.float32), lm_head=head)
    _check_shapes(arch, weights)
    return weights


def _layer(arch: GptOssArch, take, index: int) -> GptOssLayer:
    attn, mlp = f"model.layers.{index}.self_attn.", f"model.layers.{index}.mlp."
    qkv = torch.cat([take(attn + p + "_proj.weight") for p in "qkv"])
    bias = torch.cat([take(attn + p + "_proj.bias") for p in "qkv"]) if arch.attention_bias else None
    experts = mlp + "experts."
    return GptOssLayer(
        attn_norm=take(f"model.layers.{index}.input_layernorm.weight", torch.float32), qkv=qkv, qkv_bias=bias,
        o=take(attn + "o_proj.weight"), o_bias=take(attn + "o_proj.bias") if arch.attention_bias else None,
        sinks=take(attn + "sinks", torch.float32),
        mlp_norm=take(f"model.layers.{index}.post_attention_layernorm.weight", torch.float32),
        router=take(mlp + "router.weight", torch.float32), router_bias=take(mlp + "router.bias", torch.float32),
        gate_up=_gate_then_up(take(experts + "gate_up_proj").transpose(1, 2)),
        gate_up_bias=_gate_then_up(take(experts + "gate_up_proj_bias")),
        down=take(experts + "down_proj").transpose(1, 2).contiguous(), down_bias=take(experts + "down_proj_bias"))


def _gate_then_up(interleaved: torch.Tensor) -> torch.Tensor:
    """Rows (dim 1) gate_0, up_0, gate_1, ... reordered to all gates, then all ups."""
    return torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1).contiguous()


def _check_shapes(arch: GptOssArch, weights: GptOssWeights) -> None:
    e, w, h = arch.experts, arch.expert_width, arch.hidden_size
    expected = {"embed": (arch.vocab_size, h), "lm_head": (arch.vocab_size, h),
                "qkv": ((arch.heads + 2 * arch.kv_heads) * arch.head_dim, h), "o": (h, arch.heads * arch.head_dim),
                "sinks": (arch.heads,), "router": (e, h), "router_bias": (e,), "gate_up": (e, 2 * w, h),
                "gate_up_bias": (e, 2 * w), "down": (e, h, w), "down_bias": (e, h)}
    for index, layer in enumerate(weights.layers):
        for name, shape in expected.items():
            actual = getattr(weights if name in ("embed", "lm_head") else layer, name)
            if tuple(actual.shape) != shape:
                raise ValueError(f"weight {name} of layer {index} has shape {tuple(actual.shape)}, config says {shape}")

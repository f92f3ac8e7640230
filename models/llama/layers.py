"""Llama-family architecture description and weights, built from Hugging Face names.

Weights are stored fused for speed: q/k/v as one ``qkv`` matrix (plus bias for Qwen2), gate/up as
one ``gate_up`` matrix. Options other families reuse this runtime through: per-head q/k RMSNorm
(``qk_norm``, Qwen3), RoPE on the first ``rotary_dim`` dims of each head only (GLM-4.5), and a
mixture of experts in the layers its :class:`MoeConfig` names (``moe``).
"""

from __future__ import annotations

from typing import Any, Optional

import attrs
import torch

from kvgate.models.gguf_kquant_embedding import embedding, head_weight
from kvgate.models.gguf_quant import cat_rows
from kvgate.models.rope_scaling import declared_scaling
from kvgate.models.moe.config import MoeConfig
from kvgate.models.moe.weights import MoeWeights, read_moe

ARCHITECTURES = {"llama": "llama", "LlamaForCausalLM": "llama", "qwen2": "qwen2", "Qwen2ForCausalLM": "qwen2"}


@attrs.define
class LlamaArch:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    rope_scaling: Optional[dict[str, Any]]
    trained_context: int
    tie_embeddings: bool
    qkv_bias: bool
    o_bias: bool = False
    qk_norm: bool = False
    moe: Optional[MoeConfig] = None
    rotary_dim: Optional[int] = None  # None: the whole head

    def sparse(self, index: int) -> bool:
        """Whether layer ``index`` is a mixture of experts."""
        return self.moe is not None and index in self.moe.sparse_layers

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], names_to_arch: dict[str, str] = ARCHITECTURES) -> "LlamaArch":
        """The dense part of the architecture; ``names_to_arch`` maps model_type/class names to the family name."""
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        arch = next((names_to_arch[n] for n in names if n in names_to_arch), None)
        if arch is None:
            raise ValueError(f"not a Llama-family model (model_type/architectures: {names})")
        if config.get("mlp_bias"):
            raise ValueError("Llama models with mlp_bias are not supported")
        try:
            hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
            rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
            theta = float(config.get("rope_theta") or rope.get("rope_theta") or 10000.0)
            trained = int(config.get("max_position_embeddings", 2048))
            return cls(
                architecture=arch, vocab_size=int(config["vocab_size"]), hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]), layers=int(config["num_hidden_layers"]),
                heads=heads, kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                rms_eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=declared_scaling(rope, trained),
                trained_context=trained,
                tie_embeddings=bool(config.get("tie_word_embeddings", False)),
                qkv_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
                o_bias=arch != "qwen2" and bool(config.get("attention_bias", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad Llama config.json: {exc!r}") from None


@attrs.define
class LayerWeights:
    attn_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: Optional[torch.Tensor]
    o: torch.Tensor
    o_bias: Optional[torch.Tensor]
    mlp_norm: torch.Tensor
    gate_up: Optional[torch.Tensor]  # None in a MoE layer
    down: Optional[torch.Tensor]
    qk_norm: Optional[torch.Tensor] = None  # [heads + kv_heads, head_dim]: each head's RMSNorm weight
    moe: Optional[MoeWeights] = None

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor, a quantized weight's own ones included (for the fingerprint)."""
        out = [t for value in attrs.astuple(self, recurse=False) for t in weight_tensors(value)]
        return out + (self.moe.tensors() if self.moe is not None else [])


@attrs.define
class LlamaWeights:
    embed: torch.Tensor  # or a PackedEmbedding (kvgate.models.gguf_kquant_embedding) of GGUF blocks
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor  # a tensor, or after quantization an Int8Weight / Int4Weight like the layers' linears
    format: str = "bf16"  # the weight format (kvgate.models.weight_format): "bf16" dense, "int8", "int4"
    native: bool = False  # each layer one native call where it applies ([model] native_layers)

    @classmethod
    def from_hf_tensors(cls, arch: LlamaArch, tensors: dict[str, torch.Tensor],
                        dtype: torch.dtype, device: torch.device) -> "LlamaWeights":
        def key(name: str) -> str:
            return name if name in tensors else name.removeprefix("model.")

        def take(name: str) -> torch.Tensor:
            if key(name) not in tensors:
                raise ValueError(f"weights are missing tensor {name!r}")
            return tensors[key(name)].to(device=device, dtype=dtype)

        def has(name: str) -> bool:
            return key(name) in tensors

        layers = [_layer(arch, take, has, i) for i in range(arch.layers)]
        embed = embedding(take("model.embed_tokens.weight"), dtype)  # GGUF blocks stay packed (a tied head too)
        has_head = "lm_head.weight" in tensors
        lm_head = take("lm_head.weight") if has_head and not arch.tie_embeddings else head_weight(embed)
        weights = cls(embed=embed, layers=layers, norm=take("model.norm.weight"), lm_head=lm_head)
        weights.check_shapes(arch)
        return weights

    def check_shapes(self, arch: LlamaArch) -> None:
        qkv_rows = (arch.heads + 2 * arch.kv_heads) * arch.head_dim
        expected = {"embed": (arch.vocab_size, arch.hidden_size), "lm_head": (arch.vocab_size, arch.hidden_size),
                    "qkv": (qkv_rows, arch.hidden_size), "o": (arch.hidden_size, arch.heads * arch.head_dim),
                    "gate_up": (2 * arch.intermediate_size, arch.hidden_size),
                    "down": (arch.hidden_size, arch.intermediate_size)}
        for index, layer in enumerate(self.layers):
            actual = {"embed": self.embed.shape, "lm_head": self.lm_head.shape, "qkv": layer.qkv.shape,
                      "o": layer.o.shape}
            if layer.moe is None:
                actual.update(gate_up=layer.gate_up.shape, down=layer.down.shape)
            else:
                layer.moe.check_shapes(arch.moe, arch.hidden_size)
            for name, shape in expected.items():
                if name in actual and tuple(actual[name]) != shape:
                    raise ValueError(f"weight {name} of layer {index} has shape {tuple(actual[name])}, "
                                     f"config says {shape}")

    def named_tensors(self) -> list[torch.Tensor]:
        out = [*weight_tensors(self.embed), self.norm, *weight_tensors(self.lm_head)]
        for layer in self.layers:
            out += layer.tensors()
        return out


def weight_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a field: itself, a quantized weight's parts, or none."""
    if isinstance(value, torch.Tensor):
        return [value]
    return value.tensors() if hasattr(value, "tensors") and not isinstance(value, MoeWeights) else []


def _layer(arch: LlamaArch, take, has, index: int) -> LayerWeights:
    prefix = f"model.layers.{index}."
    attn = prefix + "self_attn."
    qkv = cat_rows([take(attn + "q_proj.weight"), take(attn + "k_proj.weight"), take(attn + "v_proj.weight")])
    bias = None
    if arch.qkv_bias:
        bias = torch.cat([take(attn + "q_proj.bias"), take(attn + "k_proj.bias"), take(attn + "v_proj.bias")])
    mlp = prefix + "mlp."
    sparse = arch.sparse(index)
    qk_norm = None
    if arch.qk_norm:
        qk_norm = torch.cat([take(attn + "q_norm.weight").expand(arch.heads, -1),
                             take(attn + "k_norm.weight").expand(arch.kv_heads, -1)])
    return LayerWeights(
        attn_norm=take(prefix + "input_layernorm.weight"), qkv=qkv, qkv_bias=bias,
        o=take(attn + "o_proj.weight"), o_bias=take(attn + "o_proj.bias") if arch.o_bias else None,
        mlp_norm=take(prefix + "post_attention_layernorm.weight"),
        gate_up=None if sparse else cat_rows([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")]),
        down=None if sparse else take(mlp + "down_proj.weight"),
        qk_norm=qk_norm, moe=read_moe(take, has, mlp, arch.moe) if sparse else None,
    )

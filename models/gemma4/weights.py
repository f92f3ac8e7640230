"""Gemma 4 text weights, read from Hugging Face names (``Gemma4ForCausalLM``, or the language model
of ``Gemma4ForConditionalGeneration`` under ``model.language_model.``; its vision and audio towers
are left unloaded). Norm weights multiply as they are (Gemma 4's RMSNorm has no ``1 +``).
"""

from __future__ import annotations

import logging
from typing import Optional

import attrs
import torch

from kvgate.models.gemma4.arch import Gemma4Arch

log = logging.getLogger("kvgate")
TOWERS = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.")


@attrs.define
class Gemma4Moe:
    """The MoE block beside the dense MLP: router ``proj`` [experts, hidden], its ``scale`` [hidden]
    and ``per_expert_scale``; experts ``gate_up`` [experts, 2 * width, hidden], ``down``; three norms."""

    proj: torch.Tensor
    scale: torch.Tensor
    per_expert_scale: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    pre_norm: torch.Tensor
    post_norm_mlp: torch.Tensor  # post_feedforward_layernorm_1, on the dense MLP's output
    post_norm_experts: torch.Tensor  # post_feedforward_layernorm_2


@attrs.define
class Gemma4Layer:
    q: torch.Tensor
    k: Optional[torch.Tensor]  # None in a KV-shared layer
    v: Optional[torch.Tensor]  # None there, and in a full layer whose values are its keys (attention_k_eq_v)
    o: torch.Tensor
    q_norm: torch.Tensor
    k_norm: Optional[torch.Tensor]
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    pre_mlp_norm: torch.Tensor
    post_mlp_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    scalar: torch.Tensor  # layer_scalar [1]
    biases: dict[str, torch.Tensor] = attrs.Factory(dict)  # q/k/v/o with attention_bias
    per_layer_gate: Optional[torch.Tensor] = None
    per_layer_projection: Optional[torch.Tensor] = None
    per_layer_norm: Optional[torch.Tensor] = None
    moe: Optional[Gemma4Moe] = None

    def tensors(self) -> list[torch.Tensor]:
        out = [t for t in attrs.astuple(self, recurse=False) if isinstance(t, torch.Tensor)]
        out += [self.biases[name] for name in sorted(self.biases)]
        return out + (list(attrs.astuple(self.moe, recurse=False)) if self.moe is not None else [])


@attrs.define
class Gemma4Weights:
    embed: torch.Tensor
    layers: list[Gemma4Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    per_layer_embed: Optional[torch.Tensor] = None  # [per_layer_vocab, layers * per_layer_dim]
    per_layer_model_projection: Optional[torch.Tensor] = None
    per_layer_projection_norm: Optional[torch.Tensor] = None

    def named_tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.norm, self.lm_head]
        out += [t for t in (self.per_layer_embed, self.per_layer_model_projection, self.per_layer_projection_norm)
                if t is not None]
        for layer in self.layers:
            out += layer.tensors()
        return out


def read_weights(arch: Gemma4Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> Gemma4Weights:
    tensors = language_model_tensors(tensors)

    def take(name: str) -> torch.Tensor:
        if name not in tensors:
            raise ValueError(f"weights are missing tensor {name!r}")
        return tensors[name].to(device=device, dtype=dtype)

    embed = take("model.embed_tokens.weight")
    untied = not arch.tie_embeddings and "lm_head.weight" in tensors
    weights = Gemma4Weights(embed=embed, layers=[_layer(arch, take, i) for i in range(arch.layers)],
                            norm=take("model.norm.weight"), lm_head=take("lm_head.weight") if untied else embed)
    if arch.per_layer_dim:
        weights.per_layer_embed = take("model.embed_tokens_per_layer.weight")
        weights.per_layer_model_projection = take("model.per_layer_model_projection.weight")
        weights.per_layer_projection_norm = take("model.per_layer_projection_norm.weight")
    check_shapes(arch, weights)
    return weights


def language_model_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The text model's tensors under ``Gemma4ForCausalLM`` names; the towers are left (and said so)."""
    left = sorted(name for name in tensors if name.startswith(TOWERS))
    if left:
        log.info("Gemma 4: serving the language model; %d tensors of its vision / audio towers are left unloaded "
                 "(%s, ...)", len(left), left[0])
    return {name.replace("model.language_model.", "model.", 1): t for name, t in tensors.items()
            if not name.startswith(TOWERS)}


def _layer(arch: Gemma4Arch, take, index: int) -> Gemma4Layer:
    prefix = f"model.layers.{index}."
    attn, mlp = prefix + "self_attn.", prefix + "mlp."
    cached = arch.cached(index)
    own_v = cached and not (arch.k_eq_v and not arch.sliding(index))
    layer = Gemma4Layer(
        q=take(attn + "q_proj.weight"), k=take(attn + "k_proj.weight") if cached else None,
        v=take(attn + "v_proj.weight") if own_v else None, o=take(attn + "o_proj.weight"),
        q_norm=take(attn + "q_norm.weight"), k_norm=take(attn + "k_norm.weight") if cached else None,
        input_norm=take(prefix + "input_layernorm.weight"),
        post_attention_norm=take(prefix + "post_attention_layernorm.weight"),
        pre_mlp_norm=take(prefix + "pre_feedforward_layernorm.weight"),
        post_mlp_norm=take(prefix + "post_feedforward_layernorm.weight"),
        gate_up=torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")]),
        down=take(mlp + "down_proj.weight"), scalar=take(prefix + "layer_scalar"))
    if arch.attention_bias:
        names = ["q", "o"] + (["k"] if cached else []) + (["v"] if own_v else [])
        layer.biases = {name: take(f"{attn}{name}_proj.bias") for name in names}
    if arch.per_layer_dim:
        layer.per_layer_gate = take(prefix + "per_layer_input_gate.weight")
        layer.per_layer_projection = take(prefix + "per_layer_projection.weight")
        layer.per_layer_norm = take(prefix + "post_per_layer_input_norm.weight")
    if arch.experts:
        layer.moe = Gemma4Moe(
            proj=take(prefix + "router.proj.weight"), scale=take(prefix + "router.scale"),
            per_expert_scale=take(prefix + "router.per_expert_scale"),
            gate_up=take(prefix + "experts.gate_up_proj"), down=take(prefix + "experts.down_proj"),
            pre_norm=take(prefix + "pre_feedforward_layernorm_2.weight"),
            post_norm_mlp=take(prefix + "post_feedforward_layernorm_1.weight"),
            post_norm_experts=take(prefix + "post_feedforward_layernorm_2.weight"))
    return layer


def check_shapes(arch: Gemma4Arch, weights: Gemma4Weights) -> None:
    hidden = arch.hidden_size
    expected = [("embed", weights.embed, (arch.vocab_size, hidden)), ("lm_head", weights.lm_head, (arch.vocab_size, hidden))]
    for i, layer in enumerate(weights.layers):
        dim, kv = arch.head_dims[i], arch.kv_heads[i]
        expected += [(f"layers.{i}.q", layer.q, (arch.heads * dim, hidden)),
                     (f"layers.{i}.o", layer.o, (hidden, arch.heads * dim)),
                     (f"layers.{i}.gate_up", layer.gate_up, (2 * arch.mlp_widths[i], hidden))]
        expected += [(f"layers.{i}.{n}", t, (kv * dim, hidden)) for n, t in (("k", layer.k), ("v", layer.v))
                     if t is not None]
        if layer.moe is not None:
            expected += [(f"layers.{i}.experts.gate_up_proj", layer.moe.gate_up, (arch.experts, 2 * arch.moe_width, hidden)),
                         (f"layers.{i}.router.proj", layer.moe.proj, (arch.experts, hidden))]
    if weights.per_layer_embed is not None:
        expected.append(("embed_tokens_per_layer", weights.per_layer_embed,
                         (arch.per_layer_vocab, arch.layers * arch.per_layer_dim)))
    for name, tensor, shape in expected:
        if tuple(tensor.shape) != shape:
            raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, config says {shape}")

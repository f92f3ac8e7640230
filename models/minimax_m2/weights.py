"""MiniMax M2's weights: the Llama layers, read after renaming MiniMax's checkpoint names, with the
whole-projection q/k norm weights kept per head as the Llama layout's ``qk_norm`` rows."""

from __future__ import annotations

import re

import attrs
import torch

from kvgate.models.llama.layers import LlamaArch, LlamaWeights

# MiniMax checkpoints (and transformers' save_pretrained) write Mixtral-style names
RENAMES = ((re.compile(r"\.block_sparse_moe\."), ".mlp."),
           (re.compile(r"\.experts\.(\d+)\.w1\."), r".experts.\1.gate_proj."),
           (re.compile(r"\.experts\.(\d+)\.w3\."), r".experts.\1.up_proj."),
           (re.compile(r"\.experts\.(\d+)\.w2\."), r".experts.\1.down_proj."),
           (re.compile(r"\.mlp\.e_score_correction_bias$"), ".mlp.gate.e_score_correction_bias"))


def llama_name(name: str) -> str:
    """The name the Llama and MoE readers look for, of a MiniMax checkpoint tensor."""
    for pattern, replacement in RENAMES:
        name = pattern.sub(replacement, name)
    return name


def minimax_m2_weights(arch: LlamaArch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                       device: torch.device) -> LlamaWeights:
    """The Llama weights of a MiniMax M2 checkpoint; each layer's ``qk_norm`` is its q_norm
    [heads * head_dim] and k_norm [kv_heads * head_dim] as rows [heads + kv_heads, head_dim]."""
    renamed = {llama_name(name): tensor for name, tensor in tensors.items()}
    weights = LlamaWeights.from_hf_tensors(attrs.evolve(arch, qk_norm=False), renamed, dtype, device)
    for index, layer in enumerate(weights.layers):
        layer.qk_norm = torch.cat([_norm(renamed, index, "q_norm", arch.heads * arch.head_dim),
                                   _norm(renamed, index, "k_norm", arch.kv_heads * arch.head_dim)])
        layer.qk_norm = layer.qk_norm.view(-1, arch.head_dim).to(device=device, dtype=dtype)
    return weights


def _norm(tensors: dict[str, torch.Tensor], index: int, which: str, width: int) -> torch.Tensor:
    name = f"model.layers.{index}.self_attn.{which}.weight"
    tensor = tensors.get(name, tensors.get(name.removeprefix("model.")))
    if tensor is None:
        raise ValueError(f"weights are missing tensor {name!r}")
    if tuple(tensor.shape) != (width,):
        raise ValueError(f"weight {which} of layer {index} has shape {tuple(tensor.shape)}, config says ({width},) "
                         "(MiniMax M2 normalises the whole projection)")
    return tensor

"""DeepSeek V3.2 weights: DeepSeek V3's (:mod:`kvgate.models.deepseek_v3.weights`) plus each layer's
indexer, read from ``self_attn.indexer.*``.

The indexer rotates its first ``rope_dim`` dims in split halves (not interleaved as MLA does), so its
rows are taken as stored. Its head-weight projection stays fp32, as Hugging Face keeps it.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

from kvgate.models.deepseek_v3.weights import DeepseekWeights, MlaLayer
from kvgate.models.deepseek_v32.arch import DeepseekV32Arch


@attrs.define
class IndexerWeights:
    q_up: torch.Tensor  # wq_b [index_heads * index_dim, q_lora_rank]
    k: torch.Tensor  # wk [index_dim, hidden]
    k_norm: torch.Tensor  # LayerNorm weight [index_dim]
    k_norm_bias: torch.Tensor
    head_weights: torch.Tensor  # weights_proj [index_heads, hidden], fp32

    def tensors(self) -> list[torch.Tensor]:
        return list(attrs.astuple(self, recurse=False))


@attrs.define
class IndexedMlaLayer(MlaLayer):
    indexer: Optional[IndexerWeights] = None

    def tensors(self) -> list[torch.Tensor]:
        return super().tensors() + self.indexer.tensors()


def from_hf_tensors(arch: DeepseekV32Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                    device: torch.device) -> DeepseekWeights:
    weights = DeepseekWeights.from_hf_tensors(arch, tensors, dtype, device)
    layers = []
    for index, layer in enumerate(weights.layers):
        indexer = _indexer(arch, tensors, index, dtype, device)
        layers.append(IndexedMlaLayer(**attrs.asdict(layer, recurse=False), indexer=indexer))
    weights.layers = layers
    return weights


def _indexer(arch: DeepseekV32Arch, tensors: dict[str, torch.Tensor], index: int, dtype: torch.dtype,
             device: torch.device) -> IndexerWeights:
    prefix = f"model.layers.{index}.self_attn.indexer."

    def take(name: str, shape: tuple[int, ...], as_dtype: torch.dtype = dtype) -> torch.Tensor:
        if prefix + name not in tensors:
            raise ValueError(f"weights are missing tensor {prefix + name!r}")
        tensor = tensors[prefix + name]
        if tuple(tensor.shape) != shape:
            raise ValueError(f"weight {prefix + name} has shape {tuple(tensor.shape)}, config says {shape}")
        return tensor.to(device=device, dtype=as_dtype)

    heads, dim = arch.index_heads, arch.index_dim
    return IndexerWeights(
        q_up=take("wq_b.weight", (heads * dim, arch.q_lora_rank)), k=take("wk.weight", (dim, arch.hidden_size)),
        k_norm=take("k_norm.weight", (dim,)), k_norm_bias=take("k_norm.bias", (dim,)),
        head_weights=take("weights_proj.weight", (heads, arch.hidden_size), torch.float32))

"""The weights of an MTP layer, read from Hugging Face names.

GLM-4.5 (and DeepSeek V3) checkpoints carry ``num_nextn_predict_layers`` extra decoder layers after
the main ones, the first at index ``num_hidden_layers``: ``model.layers.{N}.enorm`` / ``hnorm``
(RMSNorms of the next token's embedding and of the main model's hidden state), ``eh_proj``
(Linear 2*hidden -> hidden, no bias), a full decoder block under the usual layer names (attention
and, past ``first_k_dense_replace``, the experts), and ``shared_head.norm``. The embedding and the
output head are the main model's unless the layer carries its own ``embed_tokens`` /
``shared_head.head``. Only the first MTP layer is read: drafting chains it on its own output.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from kvgate.models.llama.layers import LayerWeights, LlamaArch, LlamaWeights, _layer
from kvgate.models.moe.config import sparse_layers


@attrs.define
class MtpWeights:
    enorm: torch.Tensor
    hnorm: torch.Tensor
    eh_proj: torch.Tensor  # [hidden, 2 * hidden]: the embedding half first, then the hidden half
    block: LayerWeights
    head_norm: torch.Tensor
    head: torch.Tensor  # [vocab, hidden]
    embed: torch.Tensor  # [vocab, hidden]


def mtp_weights_from_hf(arch: LlamaArch, config: dict[str, Any], tensors: dict[str, torch.Tensor],
                        main: LlamaWeights, dtype: torch.dtype, device: torch.device) -> MtpWeights:
    """The first MTP layer of a checkpoint whose config declares ``num_nextn_predict_layers`` > 0."""
    declared = int(config.get("num_nextn_predict_layers") or 0)
    if declared <= 0:
        raise ValueError("this checkpoint has no MTP layer (config.json num_nextn_predict_layers is 0)")
    index = arch.layers
    prefix = f"model.layers.{index}."

    def take(name: str) -> torch.Tensor:
        if name not in tensors:
            raise ValueError(f"config.json declares {declared} MTP layer(s) but the weights are missing {name!r}")
        return tensors[name].to(device=device, dtype=dtype)

    block_arch = arch
    if arch.moe is not None:  # the MTP block is sparse when the main layers at its index would be
        block_arch = attrs.evolve(arch, moe=attrs.evolve(arch.moe, sparse_layers=sparse_layers(config, index + 1)))
    def own(name: str) -> bool:  # the layer's own copy of a tensor it may share with the main model
        return prefix + name in tensors

    weights = MtpWeights(
        enorm=take(prefix + "enorm.weight"), hnorm=take(prefix + "hnorm.weight"),
        eh_proj=take(prefix + "eh_proj.weight"),
        block=_layer(block_arch, take, lambda name: name in tensors, index),
        head_norm=take(prefix + "shared_head.norm.weight"),
        head=take(prefix + "shared_head.head.weight") if own("shared_head.head.weight") else main.lm_head,
        embed=take(prefix + "embed_tokens.weight") if own("embed_tokens.weight") else main.embed)
    hidden = arch.hidden_size
    if tuple(weights.eh_proj.shape) != (hidden, 2 * hidden):
        raise ValueError(f"MTP eh_proj has shape {tuple(weights.eh_proj.shape)}, expected {(hidden, 2 * hidden)}")
    return weights

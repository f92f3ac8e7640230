"""The weights of a Qwen3.5 / Qwen3.5-MoE / Qwen3-Next MTP layer, read from a checkpoint's ``mtp.*`` tensors.

Released checkpoints carry one such layer (config ``mtp_num_hidden_layers: 1``, Qwen3-Next's
``num_nextn_predict_layers``), at the top level of the checkpoint (never under
``model.language_model.``): ``mtp.pre_fc_norm_embedding`` and ``mtp.pre_fc_norm_hidden``
(zero-centred RMSNorms of the next token's embedding and of the main model's hidden state),
``mtp.fc`` (Linear 2*hidden -> hidden, no bias, the embedding half first), ``mtp.layers.0.*`` (one
gated full-attention decoder layer under the main layers' names, with the family's dense MLP or
MoE and shared expert) and ``mtp.norm``. The embedding and the output head are the main model's.
The block is read by the main layers' reader as one more full-attention layer.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from kvgate.models.qwen3_5.arch import FULL, Qwen35Arch
from kvgate.models.qwen3_5.weights import Layer, Qwen35Weights, _layer, tensor_readers

PREFIX = "mtp."


@attrs.define
class Qwen35MtpWeights:
    embed_norm: torch.Tensor  # [hidden] scale 1 + w, fp32
    hidden_norm: torch.Tensor
    fc: torch.Tensor  # [hidden, 2 * hidden]: the embedding half first, then the hidden half
    block: Layer  # a full-attention layer
    norm: torch.Tensor  # [hidden] scale, fp32: before the main model's output head


def block_arch(arch: Qwen35Arch, tensors: dict[str, torch.Tensor]) -> Qwen35Arch:
    """The architecture with the MTP block as one more full-attention layer, sparse when it has a router."""
    index = arch.layers
    out = attrs.evolve(arch, layers=index + 1, kinds=arch.kinds + (FULL,))
    if arch.moe is not None and PREFIX + "layers.0.mlp.gate.weight" in tensors:
        out = attrs.evolve(out, moe=attrs.evolve(arch.moe, sparse_layers=arch.moe.sparse_layers + (index,)))
    elif arch.moe is not None:
        out = attrs.evolve(out, moe=attrs.evolve(arch.moe, sparse_layers=tuple(
            i for i in arch.moe.sparse_layers if i != index)))
    return out


def mtp_weights_from_hf(arch: Qwen35Arch, config: dict[str, Any], tensors: dict[str, torch.Tensor],
                        main: Qwen35Weights, dtype: torch.dtype, device: torch.device) -> Qwen35MtpWeights:
    """The checkpoint's MTP layer (``[engine] speculative = "mtp"``); a clear error when it has none."""
    if not any(name.startswith(PREFIX) for name in tensors):
        raise ValueError('[engine] speculative = "mtp": this checkpoint has no MTP layer (no mtp.* tensors; '
                         "a GGUF conversion leaves it out)")
    index = arch.layers
    renamed = {name.replace(PREFIX + "layers.0.", f"model.layers.{index}.", 1): tensor
               for name, tensor in tensors.items() if name.startswith(PREFIX)}

    take, scale = tensor_readers(renamed, dtype, device, "the MTP layer", kind="MTP ",
                                 shown=lambda name: name.replace(f"model.layers.{index}.", PREFIX + "layers.0."))

    hidden = arch.hidden_size
    return Qwen35MtpWeights(
        embed_norm=scale(PREFIX + "pre_fc_norm_embedding.weight", hidden),
        hidden_norm=scale(PREFIX + "pre_fc_norm_hidden.weight", hidden),
        fc=take(PREFIX + "fc.weight", (hidden, 2 * hidden)),
        block=_layer(block_arch(arch, tensors), index, take, scale, renamed),
        norm=scale(PREFIX + "norm.weight", hidden))

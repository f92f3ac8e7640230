"""The weights of DeepSeek V4's MTP layer, ``mtp.0.*`` in DeepSeek's checkpoints (transformers
neither builds nor saves it): ``enorm`` / ``hnorm`` (RMS norms of the next token's embedding and of
the main model's residual streams), ``e_proj`` / ``h_proj``, a full decoder block with sliding-only
attention and learned routing (``attn.*``, ``ffn.*``, ``attn_norm``, ``ffn_norm``, ``hc_attn_*``,
``hc_ffn_*``), its own stream collapse ``hc_head_{fn,base,scale}`` and output norm ``norm``; the
embedding and the output head are the main model's unless the layer carries its own
(``emb.tok_emb.weight``, ``head.weight``)."""

from __future__ import annotations

import attrs
import torch

from kvgate.models.deepseek_v4.arch import SLIDING, DeepseekV4Arch
from kvgate.models.deepseek_v4.checkpoint import read_layer, taker
from kvgate.models.deepseek_v4.weights import DeepseekV4Weights, Layer, Mixer

PREFIX = "mtp.0."


@attrs.define
class DraftWeights:
    enorm: torch.Tensor  # fp32
    hnorm: torch.Tensor
    e_proj: torch.Tensor  # [hidden, hidden]
    h_proj: torch.Tensor
    block: Layer
    head_mixer: Mixer
    norm: torch.Tensor
    embed: torch.Tensor
    lm_head: torch.Tensor


def block_arch(arch: DeepseekV4Arch) -> DeepseekV4Arch:
    """The architecture with the MTP block as one more (sliding-only, learned-routing) layer."""
    return attrs.evolve(arch, layers=arch.layers + 1, kinds=arch.kinds + (SLIDING,), hashed=arch.hashed + (False,))


def draft_weights_from_hf(arch: DeepseekV4Arch, config, tensors: dict[str, torch.Tensor], weights: DeepseekV4Weights,
                          dtype: torch.dtype, device: torch.device) -> DraftWeights:
    layer = {name.removeprefix("model.")[len(PREFIX):]: t for name, t in tensors.items()
             if name.removeprefix("model.").startswith(PREFIX)}
    if not layer:
        raise ValueError('[engine] speculative = "mtp": this DeepSeek V4 checkpoint has no MTP layer '
                         f"({PREFIX}* tensors)")
    index, f32 = arch.layers, torch.float32
    as_block = {f"layers.{index}.{name}": t for name, t in layer.items()}
    take, take_block = taker(layer, dtype, device), taker(as_block, dtype, device)
    return DraftWeights(
        enorm=take("enorm.weight", f32), hnorm=take("hnorm.weight", f32), e_proj=take("e_proj.weight"),
        h_proj=take("h_proj.weight"), block=read_layer(block_arch(arch), take_block, as_block, index),
        head_mixer=Mixer(*(take(f"hc_head_{p}", f32) for p in ("fn", "base", "scale"))),
        norm=take("norm.weight", f32),
        embed=take("emb.tok_emb.weight") if "emb.tok_emb.weight" in layer else weights.embed,
        lm_head=take("head.weight") if "head.weight" in layer else weights.lm_head)

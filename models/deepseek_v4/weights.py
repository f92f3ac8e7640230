"""DeepSeek V4 weights as the runtime holds them (read from a checkpoint by :mod:`.checkpoint`).

Norms, sinks, compressor position biases and the hyper-connection mixers are fp32 (as transformers
keeps them); projections and experts take the runtime dtype.
"""


from __future__ import annotations

from typing import Optional

import attrs
import torch



def _tensors(obj) -> list[torch.Tensor]:
    out = []
    for value in attrs.astuple(obj, recurse=False):
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif attrs.has(type(value)):
            out += _tensors(value)
    return out


@attrs.define
class Compressor:
    kv: torch.Tensor  # [width, hidden], width = 2 dims (CSA: two overlapping series) or 1 x dims (HCA)
    gate: torch.Tensor
    bias: torch.Tensor  # ape [rate, width], fp32
    norm: torch.Tensor  # [dims], fp32


@attrs.define
class Indexer:
    q_up: torch.Tensor  # [index_heads * index_dim, q_lora_rank]
    head_weights: torch.Tensor  # [index_heads, hidden]
    compressor: Compressor


@attrs.define
class Attention:
    q_down: torch.Tensor
    q_norm: torch.Tensor
    q_up: torch.Tensor
    kv: torch.Tensor  # [head_dim, hidden]
    kv_norm: torch.Tensor
    o_a: torch.Tensor  # [groups, o_lora_rank, heads * head_dim / groups]
    o_b: torch.Tensor
    sinks: torch.Tensor  # [heads], fp32
    compressor: Optional[Compressor] = None
    indexer: Optional[Indexer] = None


@attrs.define
class Mixer:
    """A hyper-connection's projection ``fn`` [(2 + hc) * hc or hc, hc * hidden], ``base``, ``scale`` (fp32)."""

    fn: torch.Tensor
    base: torch.Tensor
    scale: torch.Tensor


@attrs.define
class Moe:
    router: torch.Tensor  # [experts, hidden]
    gate_up: torch.Tensor  # [experts, 2 * width, hidden]
    down: torch.Tensor  # [experts, hidden, width]
    shared_gate_up: Optional[torch.Tensor]
    shared_down: Optional[torch.Tensor]
    bias: Optional[torch.Tensor] = None  # score correction [experts], fp32 (learned routing)
    table: Optional[torch.Tensor] = None  # tid2eid [vocab, top_k], long (hash routing)


@attrs.define
class Layer:
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor
    attn_mixer: Mixer
    mlp_mixer: Mixer
    attention: Attention
    moe: Moe


@attrs.define
class DeepseekV4Weights:
    embed: torch.Tensor
    layers: list[Layer]
    head_mixer: Mixer
    norm: torch.Tensor
    lm_head: torch.Tensor

    def named_tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.norm, self.lm_head] + _tensors(self.head_mixer)
        for layer in self.layers:
            out += _tensors(layer)
        return out

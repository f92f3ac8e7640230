"""DeepSeek V3 weights from Hugging Face names, laid out for absorbed MLA.

``kv_b_proj`` splits into each head's key up-projection ``k_up`` [heads, nope_dim, latent] and value
up-projection ``v_up`` [heads, v_dim, latent], which queries and outputs are multiplied by instead of
expanding the cached latent. DeepSeek rotates interleaved pairs of dims; the rope rows of the query
and latent projections are reordered at load (evens, then odds) so that the split-half rotation of
:mod:`kvgate.models.rope` rotates the same pairs -- dot products do not see the order.
"""

from __future__ import annotations

from typing import Optional

import attrs
import torch

from kvgate.models.deepseek_v3.arch import DeepseekArch
from kvgate.models.moe.weights import MoeWeights, read_moe


@attrs.define
class MlaLayer:
    attn_norm: torch.Tensor
    q_down: Optional[torch.Tensor]  # [q_lora_rank, hidden], None without the query bottleneck
    q_norm: Optional[torch.Tensor]
    q_up: torch.Tensor  # [heads * (nope_dim + rope_dim), q_lora_rank or hidden]
    kv_down: torch.Tensor  # [kv_lora_rank + rope_dim, hidden]
    kv_norm: torch.Tensor
    k_up: torch.Tensor  # [heads, nope_dim, kv_lora_rank]
    v_up: torch.Tensor  # [heads, v_dim, kv_lora_rank]
    o: torch.Tensor
    mlp_norm: torch.Tensor
    gate_up: Optional[torch.Tensor]  # None in a MoE layer
    down: Optional[torch.Tensor]
    moe: Optional[MoeWeights] = None

    def tensors(self) -> list[torch.Tensor]:
        out = [t for t in attrs.astuple(self, recurse=False) if isinstance(t, torch.Tensor)]
        return out + (self.moe.tensors() if self.moe is not None else [])


@attrs.define
class DeepseekWeights:
    embed: torch.Tensor
    layers: list[MlaLayer]
    norm: torch.Tensor
    lm_head: torch.Tensor

    @classmethod
    def from_hf_tensors(cls, arch: DeepseekArch, tensors: dict[str, torch.Tensor],
                        dtype: torch.dtype, device: torch.device) -> "DeepseekWeights":
        def has(name: str) -> bool:
            return name in tensors

        def take(name: str) -> torch.Tensor:
            if name not in tensors:
                raise ValueError(f"weights are missing tensor {name!r}")
            return tensors[name].to(device=device, dtype=dtype)

        embed = take("model.embed_tokens.weight")
        lm_head = take("lm_head.weight") if has("lm_head.weight") and not arch.tie_embeddings else embed
        layers = [_layer(arch, take, has, i) for i in range(arch.layers)]
        if tuple(layers[0].kv_down.shape) != (arch.latent_dim, arch.hidden_size):
            raise ValueError(f"weight kv_a_proj_with_mqa has shape {tuple(layers[0].kv_down.shape)}, "
                             f"config says {(arch.latent_dim, arch.hidden_size)}")
        for layer in layers:
            if layer.moe is not None:
                layer.moe.check_shapes(arch.moe, arch.hidden_size)
        return cls(embed=embed, layers=layers, norm=take("model.norm.weight"), lm_head=lm_head)

    def named_tensors(self) -> list[torch.Tensor]:
        out = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            out += layer.tensors()
        return out


def _deinterleave(rows: torch.Tensor) -> torch.Tensor:
    """Rows (x0, x1, x2, x3, ...) of interleaved rope pairs as (x0, x2, ..., x1, x3, ...)."""
    return torch.cat([rows[0::2], rows[1::2]])


def _layer(arch: DeepseekArch, take, has, index: int) -> MlaLayer:
    prefix = f"model.layers.{index}."
    attn = prefix + "self_attn."
    lora = arch.q_lora_rank is not None
    q_up = take(attn + ("q_b_proj.weight" if lora else "q_proj.weight"))
    kv_down = take(attn + "kv_a_proj_with_mqa.weight")
    if arch.rope_interleave:
        heads = q_up.view(arch.heads, arch.nope_dim + arch.rope_dim, -1)
        q_up = torch.cat([heads[:, :arch.nope_dim], torch.stack([_deinterleave(h[arch.nope_dim:]) for h in heads])],
                         1).reshape(q_up.shape)
        kv_down = torch.cat([kv_down[:arch.kv_lora_rank], _deinterleave(kv_down[arch.kv_lora_rank:])])
    if has(attn + "kv_b_proj.weight"):
        kv_b = take(attn + "kv_b_proj.weight").view(arch.heads, arch.nope_dim + arch.v_dim, arch.kv_lora_rank)
    else:  # split by a GGUF converter: k_b [heads, latent, nope_dim], v_b [heads, v_dim, latent]
        kv_b = torch.cat([take(attn + "k_b_proj.weight").transpose(1, 2), take(attn + "v_b_proj.weight")], 1)
    mlp = prefix + "mlp."
    sparse = arch.sparse(index)
    return MlaLayer(
        attn_norm=take(prefix + "input_layernorm.weight"),
        q_down=take(attn + "q_a_proj.weight") if lora else None,
        q_norm=take(attn + "q_a_layernorm.weight") if lora else None, q_up=q_up.contiguous(),
        kv_down=kv_down.contiguous(), kv_norm=take(attn + "kv_a_layernorm.weight"),
        k_up=kv_b[:, :arch.nope_dim].contiguous(), v_up=kv_b[:, arch.nope_dim:].contiguous(),
        o=take(attn + "o_proj.weight"), mlp_norm=take(prefix + "post_attention_layernorm.weight"),
        gate_up=None if sparse else torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")]),
        down=None if sparse else take(mlp + "down_proj.weight"),
        moe=read_moe(take, has, mlp, arch.moe) if sparse else None)

"""DeepSeek V4 weights from the checkpoint names DeepSeek ships (and transformers saves), with or
without a leading ``model.``: ``layers.<i>.attn.{wq_a,q_norm,wq_b,wkv,norm,wo_a,wo_b,attn_sink}``,
its ``compressor.{wkv,wgate,ape,norm}`` and ``indexer.{wq_b,weights_proj,compressor.*}``,
``layers.<i>.ffn.{gate.{weight,bias,tid2eid},experts.<e>.w1/w2/w3,shared_experts.w1/w2/w3}``,
``layers.<i>.hc_{attn,ffn}_{fn,base,scale}``, ``hc_head`` and ``head``.

Block-scaled FP8 weights (and FP4 experts) arrive dequantized (:mod:`kvgate.models.fp8_blocks`);
any other one-byte tensor is refused.
"""

from __future__ import annotations

from typing import Optional

import torch

from kvgate.models.deepseek_v4.arch import CSA, SLIDING, DeepseekV4Arch
from kvgate.models.deepseek_v4.weights import (Attention, Compressor, DeepseekV4Weights, Indexer, Layer, Mixer,
                                               Moe)


def read_weights(arch: DeepseekV4Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: torch.device) -> DeepseekV4Weights:
    """The runtime's weights of a checkpoint's tensors (shapes checked against ``arch``)."""
    tensors = {name.removeprefix("model."): t for name, t in tensors.items()}
    packed = sorted(name for name, t in tensors.items() if t.dtype.itemsize == 1)
    if packed:
        raise ValueError(f"quantized DeepSeek V4 weights ({packed[0]}: {tensors[packed[0]].dtype}) are not "
                         "supported: use a bf16, fp32 or block-scaled FP8 checkpoint (quantization_config "
                         "quant_method 'fp8')")
    take = taker(tensors, dtype, device)
    embed = take("embed.weight", dtype, "embed_tokens.weight")
    head = embed if arch.tie_embeddings else take("head.weight", dtype, "lm_head.weight")
    mixer = Mixer(*(take(f"hc_head_{p}", torch.float32, f"hc_head.hc_{p}") for p in ("fn", "base", "scale")))
    layers = [read_layer(arch, take, tensors, i) for i in range(arch.layers)]
    weights = DeepseekV4Weights(embed=embed, layers=layers, head_mixer=mixer, norm=take("norm.weight", torch.float32),
                  lm_head=head)
    _check_shapes(arch, weights)
    return weights


def taker(tensors: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device):
    """``take(name, as_dtype=dtype, *aliases)``: the first of the names found, on ``device``."""

    def take(name: str, as_dtype: Optional[torch.dtype] = dtype, *aliases: str) -> torch.Tensor:
        found = next((n for n in (name, *aliases) if n in tensors), None)
        if found is None:
            raise ValueError(f"weights are missing tensor {name!r}")
        return tensors[found].to(device=device, dtype=as_dtype)

    return take


def _compressor(take, prefix: str) -> Compressor:
    f32 = torch.float32
    return Compressor(kv=take(prefix + "wkv.weight"), gate=take(prefix + "wgate.weight"),
                      bias=take(prefix + "ape", f32), norm=take(prefix + "norm.weight", f32))


def read_layer(arch: DeepseekV4Arch, take, tensors, index: int) -> Layer:
    prefix, f32 = f"layers.{index}.", torch.float32
    attn = prefix + "attn."
    o_a = take(attn + "wo_a.weight")
    attention = Attention(
        q_down=take(attn + "wq_a.weight"), q_norm=take(attn + "q_norm.weight", f32), q_up=take(attn + "wq_b.weight"),
        kv=take(attn + "wkv.weight"), kv_norm=take(attn + "norm.weight", f32),
        o_a=o_a.view(arch.o_groups, arch.o_lora_rank, -1), o_b=take(attn + "wo_b.weight"),
        sinks=take(attn + "attn_sink", f32))
    if arch.kinds[index] != SLIDING:
        attention.compressor = _compressor(take, attn + "compressor.")
    if arch.kinds[index] == CSA:
        attention.indexer = Indexer(q_up=take(attn + "indexer.wq_b.weight"),
                                    head_weights=take(attn + "indexer.weights_proj.weight"),
                                    compressor=_compressor(take, attn + "indexer.compressor."))
    ffn = prefix + "ffn."
    experts = [f"{ffn}experts.{e}." for e in range(arch.experts)]
    moe = Moe(router=take(ffn + "gate.weight"),
              gate_up=torch.stack([torch.cat([take(e + "w1.weight"), take(e + "w3.weight")]) for e in experts]),
              down=torch.stack([take(e + "w2.weight") for e in experts]), shared_gate_up=None, shared_down=None)
    if arch.shared_experts:
        shared = ffn + "shared_experts."
        moe.shared_gate_up = torch.cat([take(shared + "w1.weight"), take(shared + "w3.weight")])
        moe.shared_down = take(shared + "w2.weight")
    if arch.hashed[index]:
        moe.table = take(ffn + "gate.tid2eid", torch.long)
    elif ffn + "gate.bias" in tensors:
        moe.bias = take(ffn + "gate.bias", f32)

    def mixer(kind: str) -> Mixer:
        return Mixer(*(take(f"{prefix}hc_{kind}_{p}", f32) for p in ("fn", "base", "scale")))

    return Layer(attn_norm=take(prefix + "attn_norm.weight", f32), mlp_norm=take(prefix + "ffn_norm.weight", f32),
                 attn_mixer=mixer("attn"), mlp_mixer=mixer("ffn"), attention=attention, moe=moe)


def _check_shapes(arch: DeepseekV4Arch, weights: DeepseekV4Weights) -> None:
    h, d, hc = arch.hidden_size, arch.head_dim, arch.hc_mult
    expected = {"embed": (weights.embed, (arch.vocab_size, h)), "hc_head.fn": (weights.head_mixer.fn, (hc, hc * h))}
    for i, layer in enumerate(weights.layers):
        a = layer.attention
        expected[f"layers.{i}.attn.wq_b"] = (a.q_up, (arch.heads * d, arch.q_lora_rank))
        expected[f"layers.{i}.attn.wkv"] = (a.kv, (d, h))
        expected[f"layers.{i}.attn.wo_a"] = (a.o_a, (arch.o_groups, arch.o_lora_rank, arch.heads * d // arch.o_groups))
        expected[f"layers.{i}.hc_attn_fn"] = (layer.attn_mixer.fn, ((2 + hc) * hc, hc * h))
        expected[f"layers.{i}.ffn.experts"] = (layer.moe.gate_up, (arch.experts, 2 * arch.moe_width, h))
        rate = arch.rate(i)
        if a.compressor is not None:
            width = d * (2 if a.indexer is not None else 1)
            expected[f"layers.{i}.attn.compressor.ape"] = (a.compressor.bias, (rate, width))
        if a.indexer is not None:
            expected[f"layers.{i}.attn.indexer.compressor.ape"] = (a.indexer.compressor.bias,
                                                                   (rate, 2 * arch.index_dim))
            expected[f"layers.{i}.attn.indexer.wq_b"] = (a.indexer.q_up,
                                                         (arch.index_heads * arch.index_dim, arch.q_lora_rank))
    for name, (tensor, shape) in expected.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, config says {shape}")

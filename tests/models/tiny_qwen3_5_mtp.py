"""A tiny Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoint with an MTP layer: transformers writes no ``mtp.*``
tensors (it ignores them), so a random layer is written next to the model in ``mtp.safetensors``
under the released checkpoints' names, its block a randomised copy of the model's full-attention
layer (with the family's MLP or MoE). ``same_token`` builds a layer that guesses the token the
main model's head ranks first for its input token's own embedding (an identity ``fc`` over the
embedding half, a block that adds nothing, unit norms), so its guesses are known in advance."""

from __future__ import annotations

import copy
import json

import torch
from safetensors.torch import save_file

from tests.models.tiny_families import hf_layer_tensors

ZEROED = ("o_proj.weight", "down_proj.weight", "experts.down_proj")  # what a same-token block zeroes


def add_qwen3_5_mtp(directory, model, seed: int = 0, same_token: bool = False) -> dict:
    """Write ``mtp.safetensors`` into ``directory`` (a checkpoint of ``model``) and declare the layer.
    Returns the random layer's parts: ``block`` (a transformers decoder layer), ``fc`` and the norm
    weights by name (``pre_fc_norm_embedding``, ``pre_fc_norm_hidden``, ``norm``)."""
    config = model.config
    full = max(i for i, kind in enumerate(config.layer_types) if kind == "full_attention")
    generator = torch.Generator().manual_seed(seed)
    block = copy.deepcopy(model.model.layers[full])
    hidden = config.hidden_size
    tensors, parts = {}, {"block": block}
    with torch.no_grad():
        for name, param in block.named_parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    for name, tensor in hf_layer_tensors(block, "mtp.layers.0.").items():
        tensors[name] = torch.zeros_like(tensor) if same_token and (name.endswith(ZEROED) or "norm" in name) else tensor
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        norm = parts[name] = torch.randn(hidden, generator=generator) * 0.3
        tensors[f"mtp.{name}.weight"] = torch.zeros(hidden) if same_token else norm
    fc = parts["fc"] = torch.randn(hidden, 2 * hidden, generator=generator) * 0.15
    tensors["mtp.fc.weight"] = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], 1) if same_token else fc
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "mtp.safetensors"),
              metadata={"format": "pt"})
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "mtp_num_hidden_layers": 1}, indent=2))
    return parts


def same_token_guess(model):
    """The guess of a ``same_token`` layer after token ``t``: argmax of lm_head . rmsnorm(embed[t])."""
    embed, head = model.model.embed_tokens.weight.detach(), model.lm_head.weight.detach()
    normed = embed * torch.rsqrt(embed.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)
    return lambda token: int(torch.argmax(head @ normed[token]))


def load_with_mtp(directory, speculative: str = "mtp", **engine):
    """The runtime of a tiny Qwen3.5-family directory, its MTP layer loaded when ``speculative`` asks."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3_5.runtime import QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT

    source = resolve_source(str(directory))
    family = next((f for f in (QWEN3_5_MOE, QWEN3_NEXT) if source.architecture in f.names), QWEN3_5)
    config = EngineConfig(block_size=4, kv_pool_tokens=4096, deterministic=True, speculative=speculative, **engine)
    return load_runtime(source, ModelConfig(dtype="fp32"), config, str(directory), family)

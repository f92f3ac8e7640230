"""Train a tiny DeepSeek V4 MTP layer toward its main model, for bench/bench_deepseek_v4.py.

The layer is computed as tests/models/test_deepseek_v4_mtp.py's reference computes it (and as the
runtime's draft head is checked to): position ``i`` pairs the main model's residual streams at
``i`` with the embedding of token ``i + 1`` (zeroed at position 0) and predicts token ``i + 2``.
The target is the main model's own greedy choice there, over the main model's greedy continuations
of random prompts. Only the MTP layer trains; the main model's embedding and head are shared.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def greedy_sequences(runtime, count: int, prompt: int, length: int, seed: int = 0) -> torch.Tensor:
    """``count`` random prompts of ``prompt`` tokens, each continued greedily to ``length`` tokens."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        tokens = torch.randint(3, runtime.info.vocab_size, (prompt,), generator=generator).tolist()
        session = runtime.new_session()
        logits = runtime.prefill(session, tokens)
        while len(tokens) < length:
            tokens.append(int(logits.argmax()))
            logits = runtime.decode([session], [tokens[-1]])[0]
        runtime.release(session)
        out.append(tokens)
    return torch.tensor(out)


def main_streams_and_targets(model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The main model's streams after its last layer at positions ``0..n-2`` and its greedy token at ``1..n-1``."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda module, args, out: captured.update(out=out))
    try:
        with torch.no_grad():
            logits = model(tokens, use_cache=False).logits
    finally:
        hook.remove()
    return captured["out"][:, :-1], logits[:, 1:].argmax(-1)


class MtpLayer(torch.nn.Module):
    def __init__(self, model, parts: dict):
        from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperHead, DeepseekV4RMSNorm

        super().__init__()
        config = model.config
        self.block, self.rotary, self.window = parts["block"], parts["rotary"], config.sliding_window
        self.head = DeepseekV4HyperHead(config)
        self.norms = torch.nn.ModuleDict({n: DeepseekV4RMSNorm(config.hidden_size, config.rms_norm_eps)
                                          for n in ("enorm", "hnorm", "norm")})
        self.e_proj, self.h_proj = (torch.nn.Parameter(parts[n].clone()) for n in ("e_proj", "h_proj"))
        with torch.no_grad():
            for name in ("hc_fn", "hc_base", "hc_scale"):
                getattr(self.head, name).copy_(parts[name])
            for name, norm in self.norms.items():
                norm.weight.copy_(parts[name])
        self.embed, self.lm_head = model.model.embed_tokens.weight, model.lm_head

    def forward(self, streams: torch.Tensor, next_tokens: torch.Tensor) -> torch.Tensor:
        length = next_tokens.shape[1]
        positions = torch.arange(length)[None]
        embedded = self.embed[next_tokens] * (positions != 0)[..., None]
        x = (F.linear(self.norms["hnorm"](streams), self.h_proj)
             + F.linear(self.norms["enorm"](embedded), self.e_proj)[:, :, None])
        embeddings = {kind: self.rotary(x, position_ids=positions, layer_type=kind) for kind in ("main", "compress")}
        q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
        mask = torch.zeros(length, length).masked_fill((k > q) | (k <= q - self.window), float("-inf"))
        out = self.block(x, position_embeddings=embeddings, position_ids=positions, attention_mask=mask[None, None],
                         input_ids=None, cache=None)
        return self.lm_head(self.norms["norm"](self.head(out)))

    def parts(self) -> dict:
        out = {name: norm.weight.detach().clone() for name, norm in self.norms.items()}
        out.update({name: getattr(self.head, name).detach().clone() for name in ("hc_fn", "hc_base", "hc_scale")})
        return {**out, "e_proj": self.e_proj.detach().clone(), "h_proj": self.h_proj.detach().clone()}


def distill(model, runtime, source, parts: dict, steps: int, sequences: int = 256,
            batch: int = 32) -> tuple[float, float]:
    """Train ``parts`` (and ``source``'s fourth layer, the block) in place; (final training loss,
    agreement with the main model's greedy token on 32 held-out continuations)."""
    tokens = greedy_sequences(runtime, count=sequences, prompt=12, length=64)
    held_out = greedy_sequences(runtime, count=32, prompt=12, length=64, seed=1)
    streams, targets = main_streams_and_targets(model, tokens)
    model.requires_grad_(False)
    layer = MtpLayer(model, parts)
    layer.block.requires_grad_(True)
    optimizer = torch.optim.Adam([p for p in layer.parameters() if p.requires_grad], lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        rows = torch.randint(0, len(tokens), (batch,), generator=generator)
        loss = F.cross_entropy(layer(streams[rows], tokens[rows, 1:]).flatten(0, 1), targets[rows].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    streams, targets = main_streams_and_targets(model, held_out)
    with torch.no_grad():
        agreement = (layer(streams, held_out[:, 1:]).argmax(-1) == targets).float().mean().item()
    parts.update(layer.parts())
    return loss.item(), agreement

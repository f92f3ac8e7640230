"""Logits of one prompt reached by other paths, for the runtimes' bit-identity tests: a prefill split
in two, and token-by-token decoding after a prefix."""

from __future__ import annotations

import torch


def split_prefill_logits(runtime, prompt: list[int], split: int) -> torch.Tensor:
    """Every position's logits of ``prompt`` prefilled as ``prompt[:split]`` then the rest."""
    session = runtime.new_session()
    head = runtime.prefill(session, prompt[:split], all_logits=True)
    return torch.cat([head, runtime.prefill(session, prompt[split:], all_logits=True)])


def decoded_logits(runtime, prompt: list[int], start: int, end: int):
    """(the session, the logits of positions ``start - 1 .. end - 2``): ``prompt[:start]``
    prefilled, then ``prompt[start:end]`` decoded one token at a time."""
    session = runtime.new_session()
    first = runtime.prefill(session, prompt[:start])
    decoded = [runtime.decode([session], [token])[0] for token in prompt[start:end]]
    return session, torch.stack([first] + decoded[:-1])

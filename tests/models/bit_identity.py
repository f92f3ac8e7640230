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


def assert_splits_forks_and_batches_bit_identical(runtime, prompt: list[int]) -> None:
    """A 150-token ``prompt``'s logits are the same bits split at 1, 63, 65 and 129 (either side of
    a 64-token chunk), after a fork at 70, and decoded in a batch of three sessions of other lengths."""
    whole = runtime.prefill(runtime.new_session(), prompt, all_logits=True)
    for split in (1, 63, 65, 129):
        session = runtime.new_session()
        parts = [runtime.prefill(session, prompt[:split], all_logits=True),
                 runtime.prefill(session, prompt[split:], all_logits=True)]
        assert torch.equal(torch.cat(parts), whole), f"split at {split}"
        runtime.release(session)
    base = runtime.new_session()
    runtime.prefill(base, prompt[:140])
    fork = runtime.fork(base, 70)
    assert torch.equal(runtime.prefill(fork, prompt[70:], all_logits=True), whole[70:])
    starts = [10, 61, 100]
    sessions = [runtime.new_session() for _ in starts]
    for session, start in zip(sessions, starts):
        runtime.prefill(session, prompt[:start])
    for step in range(3):
        logits = runtime.decode(sessions, [prompt[start + step] for start in starts])
        assert all(torch.equal(logits[row], whole[start + step]) for row, start in enumerate(starts)), step

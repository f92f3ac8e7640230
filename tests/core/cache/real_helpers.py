"""Running requests through a CacheManager the way the engine does, on the real runtime."""

from __future__ import annotations

import threading

import torch

NS = "ns-test"


def text_tokens(runtime, text: str) -> list[int]:
    return runtime.tokenizer.encode(text).ids


def long_text(seed: int, words: int) -> str:
    vocab = ["alpha", "kernel", "cache", "river", "stone", "matrix", "token", "agent", "shell", "graph", "orbit"]
    return " ".join(vocab[(seed * 7 + i * i + i // 3) % len(vocab)] + str((i * seed) % 13) for i in range(words))


def run_request(manager, runtime, tokens, cache_key=None, namespace=NS, output_tokens=3, load_on_thread=True):
    """plan -> load (worker thread) -> attach -> prefill the rest -> greedy decode -> finish.

    Returns (plan, logits after the prompt, tokens of the finished session)."""
    plan = manager.plan(namespace, tokens, cache_key)
    if plan.needs_load:
        worker = threading.Thread(target=manager.load, args=(plan,))
        worker.start()
        worker.join()
    session = manager.attach(plan)
    assert session.tokens == tokens[:session.length] and session.length == plan.cached_tokens
    logits = prefill_with_reclaim(manager, runtime, session, tokens[session.length:])
    token = int(torch.argmax(logits))
    for _ in range(output_tokens):
        token = int(torch.argmax(runtime.decode([session], [token])[0]))
    final = list(session.tokens)
    manager.finish(namespace, session, cache_key)
    return plan, logits, final


def prefill_with_reclaim(manager, runtime, session, tokens):
    """Prefill as the engine does: when the pool is exhausted, reclaim cache state and retry once."""
    try:
        return runtime.prefill(session, tokens)
    except Exception as exc:
        if type(exc).__name__ != "PoolExhausted":
            raise
        needed = -(-(session.length + len(tokens)) // runtime.block_size) - len(session.block_table) + 1
        manager.reclaim(needed)
        return runtime.prefill(session, tokens)


def full_prefill_logits(runtime, tokens):
    session = runtime.new_session()
    try:
        return runtime.prefill(session, tokens)
    finally:
        runtime.release(session)


def assert_same_logits(actual, expected):
    """Bit-identical: the runtime runs the deterministic default (``engine.deterministic``), whose
    arithmetic gives a restored, forked or appended prompt exactly the logits of its full prefill."""
    assert torch.equal(actual, expected), f"max difference {(actual - expected).abs().max().item()}"

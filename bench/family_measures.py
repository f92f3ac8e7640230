"""The measures ``bench_deterministic.py --family`` takes of each runtime: cold prefill of 512 and
2,048 tokens (where the context allows) and decode at batch 1 and 8 over ~1,000 tokens of context;
``quick`` shortens them to a smoke test (64-token prefill, 4 decode steps over 64 tokens).
"""

from __future__ import annotations

from bench_hit_floor import timed_prefill


def family_measures(ids: list[int], context: int, quick: bool = False) -> dict:
    """Name -> a function of a runtime giving seconds (prefill) or tokens per second (decode)."""
    from bench_deterministic import decode_rate

    prefills = [64] if quick else [n for n in (512, 2048) if n <= context]
    decode_tokens, steps = (64, 4) if quick else (min(1000, context // 2), 32)
    chosen = {f"cold prefill {n:,} (s)": prefill_of(ids[:n]) for n in prefills}
    chosen["decode batch-1 (tok/s)"] = lambda rt: decode_rate(rt, [ids[:decode_tokens]], steps)
    batch = [ids[i * 7:i * 7 + decode_tokens - 4 * i] for i in range(8)]  # unequal lengths, as in a real batch
    chosen["decode batch-8 (tok/s)"] = lambda rt: decode_rate(rt, batch, steps)
    return chosen


def prefill_of(ids: list[int]):
    return lambda runtime: timed_prefill(runtime, ids, 0)

"""Tokenizer-cache benchmark (issue 7): a multi-turn ChatML conversation growing one turn at a time
to about 50 K tokens, tokenized with no cache, L0 only, L1 only and both, side by side in one run.

    python bench/bench_tokenizer.py [--target-tokens 50000] [--reps 7] [--l1-budget-mb 50]

Uses the real SmolLM2 tokenizer (built from the embedded GGUF by kvgate.models.gguf_tokenizer).
Prints a per-turn table (every tenth turn), medians, the final-turn ratios, whether every token id
equalled plain tokenization, and cache memory (accounted and measured with tracemalloc) against the
configured budget.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kvgate.core.tokenizer.service import TokenizerService  # noqa: E402
from kvgate.plugins.tokenizer_cache import cache_factory  # noqa: E402
from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig  # noqa: E402
from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf  # noqa: E402

WORDS = ("the agent reads file src/main.py and calls tool grep with pattern TODO then edits function parse_args "
         "returns error because value is None so we retry with a default timeout of 30 seconds").split()
MODES = {"none": (False, False), "l0": (True, False), "l1": (False, True), "both": (True, True)}


def message_text(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        roll = rng.random()
        parts.append(rng.choice(WORDS) if roll < 0.85 else str(rng.randint(0, 99999)) if roll < 0.93
                     else rng.choice(["中文", "日本語", "😀", "é", "```python\nx = 1\n```", "\n\n- item"]))
    return " ".join(parts)


def conversation(tokenizer, target_tokens: int, seed: int = 0) -> list[str]:
    """Prompts: prompt[i] is the conversation after i+1 user turns, ending in an open assistant turn."""
    rng = random.Random(seed)
    history = "<|im_start|>system\nYou are a coding agent. Use the tools.<|im_end|>\n"
    prompts = []
    while True:
        history += f"<|im_start|>user\n{message_text(rng, 150)}<|im_end|>\n"
        prompt = history + "<|im_start|>assistant\n"
        prompts.append(prompt)
        if len(tokenizer.encode(prompt, add_special_tokens=False).ids) >= target_tokens:
            return prompts
        history += f"<|im_start|>assistant\n{message_text(rng, 200)}<|im_end|>\n"


def service(tokenizer, mode: str, l1_bytes: int) -> TokenizerService:
    l0, l1 = MODES[mode]
    config = TokenizerCacheConfig(enable_l0=l0, enable_l1=l1, l1_max_bytes=l1_bytes)
    return TokenizerService(tokenizer, cache_factory(config))


def timed(svc: TokenizerService, text: str) -> tuple[float, list[int]]:
    start = time.perf_counter()
    ids = svc.encode(text)
    return (time.perf_counter() - start) * 1000, ids


def grow(tokenizer, prompts: list[str], l1_bytes: int) -> tuple[list[dict], bool]:
    services = {mode: service(tokenizer, mode, l1_bytes) for mode in MODES}
    rows, identical = [], True
    for turn, prompt in enumerate(prompts, 1):
        plain = tokenizer.encode(prompt, add_special_tokens=False).ids
        row = {"turn": turn, "tokens": len(plain)}
        for mode, svc in services.items():
            row[mode], ids = timed(svc, prompt)
            identical &= ids == plain
        row["both_repeat"], ids = timed(services["both"], prompt)  # the same prompt again: an L0 hit
        identical &= ids == plain
        rows.append(row)
    return rows, identical


def final_turn(tokenizer, prompts: list[str], reps: int, l1_bytes: int) -> dict[str, float]:
    """Median ms for the last prompt, each rep on caches that saw only the previous turn."""
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(reps):
        for mode in MODES:
            svc = service(tokenizer, mode, l1_bytes)
            svc.encode(prompts[-2])
            ms, ids = timed(svc, prompts[-1])
            assert ids == svc.encode_uncached(prompts[-1])
            samples[mode].append(ms)
    return {mode: statistics.median(values) for mode, values in samples.items()}


def memory(tokenizer, prompts: list[str], config: TokenizerCacheConfig) -> tuple[dict, int]:
    gc.collect()
    tracemalloc.start()
    svc = TokenizerService(tokenizer, cache_factory(config))
    base = tracemalloc.get_traced_memory()[0]
    for prompt in prompts:
        svc.encode(prompt)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return svc.cache_stats(), held


def report(rows: list[dict], identical: bool, final: dict[str, float]) -> None:
    print(f"{'turn':>5} {'tokens':>7} {'none ms':>9} {'L0 ms':>9} {'L1 ms':>9} {'both ms':>9} {'repeat ms':>9}")
    for row in rows:
        if row["turn"] % 10 == 0 or row is rows[-1]:
            print(f"{row['turn']:>5} {row['tokens']:>7} {row['none']:>9.2f} {row['l0']:>9.2f} {row['l1']:>9.2f}"
                  f" {row['both']:>9.2f} {row['both_repeat']:>9.3f}")
    later = rows[1:]
    medians = {key: statistics.median(r[key] for r in later) for key in ("none", "l0", "l1", "both", "both_repeat")}
    print("median over turns 2..N (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    print(f"final turn ({rows[-1]['tokens']} tokens), median of reps (ms): "
          + ", ".join(f"{k} {v:.2f}" for k, v in final.items()))
    print(f"speed-up vs no cache at the final turn: L1 hit {final['none'] / final['l1']:.1f}x, "
          f"both {final['none'] / final['both']:.1f}x; exact repeat (L0 hit) "
          f"{medians['none'] / medians['both_repeat']:.0f}x (median over turns)")
    print(f"token ids identical to plain tokenization on every turn and mode: {identical}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-tokens", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--l1-budget-mb", type=float, default=50)
    parser.add_argument("--small-budget-mb", type=float, default=4, help="L1 budget of the eviction/memory check")
    args = parser.parse_args()
    tokenizer = smollm2_from_gguf()
    prompts = conversation(tokenizer, args.target_tokens)
    l1_bytes = int(args.l1_budget_mb * 1024 * 1024)
    print(f"SmolLM2 tokenizer; {len(prompts)} turns, final prompt {len(prompts[-1])} chars; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rows, identical = grow(tokenizer, prompts, l1_bytes)
    report(rows, identical, final_turn(tokenizer, prompts, args.reps, l1_bytes))
    for label, config in [("default budgets", TokenizerCacheConfig(l1_max_bytes=l1_bytes)),
                          ("L1 only, small budget", TokenizerCacheConfig(
                              enable_l0=False, l1_max_bytes=int(args.small_budget_mb * 1024 * 1024)))]:
        stats, held = memory(tokenizer, prompts, config)
        l1 = stats["l1"]
        print(f"memory, {label}: L1 accounted {l1['bytes'] / 2**20:.2f} MiB of {l1['max_bytes'] / 2**20:.2f} MiB "
              f"({l1['entries']} entries, {l1['evictions']} evictions); L0 {stats['l0']['entries']} entries; "
              f"measured Python memory held by the caches {held / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()

"""How often a hybrid model snapshots its recurrent state (``[cache] state_stride``), measured.

A cut between snapshots (a fork inside a cached prompt) replays the tokens since the nearest one; a
snapshot costs every linear layer's recurrent and conv state, kept for as long as its cache entry.
On the mid-size Qwen3.5 checkpoint (bench/family_checkpoints.py, hidden 512, deterministic default)
this measures a cold prefill of ``--tokens`` tokens, the fork of that session at distances past its
only snapshot (the replay), and one snapshot's bytes beside a token's K/V. Per candidate stride it
then gives the mean replay of a fork at a random token (stride / 2 tokens) as a share of the cold
prefill, and the snapshots' bytes as a share of the K/V bytes, at this checkpoint and, from the
layout, at Qwen3.5-27B's and Qwen3.5-35B-A3B's sizes.
Usage: python bench/bench_state_stride.py [--tokens 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import random
import statistics
import time

from bench_deterministic import load
from family_checkpoints import checkpoint

# one snapshot's bytes and one token's K/V bytes at the real sizes (README's hybrid state table)
REAL = {"Qwen3.5-27B": (153_944_064, 65_536), "Qwen3.5-35B-A3B": (64_389_120, 20_480)}
STRIDES = (256, 512, 1024, 2048, 4096, 8192)


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(runtime, ids: list[int], distances: list[int], repeats: int) -> dict:
    """Median seconds: the cold prefill of ``ids``, and a fork replaying each distance."""
    runtime.set_state_stride(1 << 20)  # snapshots only at the prefill's start and end
    cold, forks = [], {d: [] for d in distances}
    for _ in range(repeats):
        session = runtime.new_session()
        cold.append(timed(lambda: runtime.prefill(session, ids)))
        for distance in distances:
            source = runtime.fork(session)  # a fork remembers its point in its source: each from a copy
            assert runtime.cut_replay_tokens(source, distance) == distance
            made = []
            forks[distance].append(timed(lambda: made.append(runtime.fork(source, distance))))
            runtime.release(made[0])
            runtime.release(source)
        runtime.release(session)
    kv_per_token = runtime.pool.bytes_per_token
    snapshot = runtime.state_bytes(len(ids)) - len(ids) * kv_per_token  # a chunk's aux: one snapshot, as stored
    return {"cold": statistics.median(cold), "forks": {d: statistics.median(s) for d, s in forks.items()},
            "snapshot": snapshot, "kv_per_token": kv_per_token}


def report(result: dict, tokens: int) -> list[str]:
    cold, forks = result["cold"], result["forks"]
    lines = [f"cold prefill of {tokens:,} tokens: {cold:.3f} s ({tokens / cold:.0f} tok/s)",
             "| fork at d past the snapshot | seconds | replayed tok/s | share of the cold prefill |",
             "| --- | --- | --- | --- |"]
    for distance, seconds in forks.items():
        rate = f"{distance / seconds:.0f}" if distance else "-"
        lines.append(f"| {distance:,} | {seconds:.4f} | {rate} | {seconds / cold:.3f} |")
    per_token = max(forks[d] / d for d in forks if d) if any(forks) else 0.0
    sizes = {"this checkpoint": (result["snapshot"], result["kv_per_token"]), **REAL}
    lines += ["", "| stride | mean replay of a random fork (tokens; share of the cold prefill) | "
              + " | ".join(f"snapshots / K/V bytes, {name}" for name in sizes) + " |",
              "| --- | --- | " + " | ".join("---" for _ in sizes) + " |"]
    for stride in STRIDES:
        replay = stride / 2 * per_token / cold
        shares = [f"{snapshot / (stride * kv):.2f}" for snapshot, kv in sizes.values()]
        lines.append(f"| {stride:,} | {stride // 2:,} ({replay:.3f}) | " + " | ".join(shares) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the checkpoint's widths / 4 (a smoke test)")
    args = parser.parse_args()
    runtime = load(True, "bf16", checkpoint("qwen3_5", args.small))
    rng = random.Random(0)
    ids = [rng.randrange(100, runtime.info.vocab_size) for _ in range(args.tokens)]
    distances = [d for d in (0, 64, 256, 1024, 4032) if d < args.tokens]
    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, Qwen3.5 mid-size checkpoint, deterministic, "
          f"median of {args.repeats}")
    print("\n".join(report(measure(runtime, ids, distances, args.repeats), args.tokens)))


if __name__ == "__main__":
    main()

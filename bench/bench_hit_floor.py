"""The lowest hit/cold TTFT ratio the runtime allows, with no server in the way.

A device hit still computes the turn's new tokens, and each of them attends over the whole context.
This runs, on the runtime alone (SmolLM2-135M bf16), a cold prefill of N tokens in one forward and
the append of the last ``--new`` tokens onto a resident prefix of N - new, and prints the ratio:
no HTTP, tokenizing, planning or streaming is included, so a served hit can only be slower.
Usage: python bench/bench_hit_floor.py [--sizes 3232,3719,3962,4692,5178] [--new 213] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_runtime import wait_for_quiet  # noqa: E402


def timed_prefill(runtime, ids: list[int], resident: int) -> float:
    """Seconds to prefill ids[resident:] onto a session already holding ids[:resident]."""
    session = runtime.new_session()
    try:
        if resident:
            runtime.prefill(session, ids[:resident])
        started = time.perf_counter()
        runtime.prefill(session, ids[resident:])
        return time.perf_counter() - started
    finally:
        runtime.release(session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3232,3719,3962,4692,5178")
    parser.add_argument("--new", type=int, default=213, help="tokens a hit computes (the agent bench's turn)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    cache_dir = os.path.join(tempfile.gettempdir(), "kvgate-bench-models")
    runtime = load_runtime(resolve_source(""), ModelConfig(dtype="bf16"), EngineConfig(), cache_dir)
    rng = random.Random(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    ids = [rng.randrange(100, runtime.info.vocab_size) for _ in range(max(sizes))]
    timed_prefill(runtime, ids[:512], 256)  # warm-up
    print(f"\nhit floor on the runtime, SmolLM2-135M bf16, {args.threads} threads, {args.new} new tokens a hit, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"{'prompt tokens':>14}{'cold s':>9}{'hit s':>8}{'hit/cold':>10}", flush=True)
    for size in sizes:
        cold, hit = [], []
        for _ in range(args.repeats):
            wait_for_quiet()
            cold.append(timed_prefill(runtime, ids[:size], 0))
            hit.append(timed_prefill(runtime, ids[:size], size - args.new))
        cold_s, hit_s = statistics.median(cold), statistics.median(hit)
        print(f"{size:>14,}{cold_s:9.3f}{hit_s:8.3f}{hit_s / cold_s:10.3f}", flush=True)


if __name__ == "__main__":
    main()

"""The weight formats of ``[model] weights`` side by side on SmolLM2-135M (bf16 activations, CPU).

Prints, per format (bf16, int8, int4): resident memory after loading (each in a fresh child
process: how much its RSS grew, and the bytes of the weights themselves), prefill seconds at 512 and 2,048 tokens (one forward), batch-1 and batch-8 aggregate
decode tokens/s, all interleaved across formats within each repeat (medians); then the per-call
time of one 576->3072 (gate_up) matmul at 1..512 rows for each path, the figures behind
``quant_linear.DENSE_ROWS``. Usage: python bench/bench_weights.py [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_runtime import KvgateSide, wait_for_quiet  # noqa: E402

FORMATS = ("bf16", "int8", "int4")


def load(fmt: str, cache_dir: str):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    return load_runtime(resolve_source(""), ModelConfig(dtype="bf16", weights=fmt, max_context=8192),
                        EngineConfig(kv_pool_tokens=8 * 2048), cache_dir)


def resident_mib(fmt: str, cache_dir: str) -> tuple[float, float]:
    """(RSS of a fresh process after loading ``fmt`` minus its RSS before, bytes of the weights), MiB."""
    code = ("import sys; sys.path.insert(0, %r); from bench_weights import load, rss, weight_mib;"
            "before = rss(); runtime = load(%r, %r); print(rss() - before, weight_mib(runtime))"
            ) % (os.path.dirname(__file__), fmt, cache_dir)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    grown, weights = out.split()[-2:]
    return float(grown), float(weights)


def weight_mib(runtime) -> float:
    tensors = {t.data_ptr(): t for t in runtime.weights.named_tensors()}
    return sum(t.numel() * t.element_size() for t in tensors.values()) / 2**20


def rss() -> float:
    with open("/proc/self/status") as handle:
        line = next(l for l in handle if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def timed(run) -> float:
    wait_for_quiet()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def call_us(fn, repeats: int = 9) -> float:
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def kernel_table(runtimes) -> None:
    from kvgate.models.quant_linear import linear

    dense = runtimes["bf16"].weights.layers[0].gate_up
    paths = {"bf16": lambda x: linear(x, dense)}
    for fmt in ("int8", "int4"):
        weight = runtimes[fmt].weights.layers[0].gate_up
        paths[f"{fmt} kernel"] = lambda x, w=weight: w.matmul(x)
        paths[f"{fmt} dequant+dense"] = lambda x, w=weight: torch.nn.functional.linear(x, w.dequantize())
    print(f"\none 576->3072 matmul, µs per call: {'rows':>6}" + "".join(f"{name:>20}" for name in paths))
    for rows in (1, 8, 64, 128, 256, 512):
        x = torch.randn(rows, dense.shape[1]).bfloat16()
        wait_for_quiet()
        print(f"{'':34}{rows:>6}" + "".join(f"{call_us(lambda: fn(x)):20.0f}" for fn in paths.values()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "kvgate-bench-models"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runtimes = {fmt: load(fmt, args.cache_dir) for fmt in FORMATS}  # converts once before the children load
    memory = {fmt: resident_mib(fmt, args.cache_dir) for fmt in FORMATS}
    sides = {fmt: KvgateSide(runtime) for fmt, runtime in runtimes.items()}
    rng = random.Random(0)
    ids = [rng.randrange(100, 49152) for _ in range(2048)]
    for side in sides.values():
        side.prefill(ids[:64])  # warm-up
    rows: dict[str, dict[str, list[float]]] = {fmt: {} for fmt in FORMATS}
    for _ in range(args.repeats):
        for fmt, side in sides.items():
            for size in (512, 2048):
                rows[fmt].setdefault(f"prefill {size} s", []).append(timed(lambda: side.prefill(ids[:size])))
            for batch in (1, 8):
                wait_for_quiet()
                rows[fmt].setdefault(f"decode b{batch} tok/s", []).append(side.decode(ids[:128], args.decode_steps, batch))
    print(f"\nweight formats, SmolLM2-135M, {args.threads} threads, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}, torch {torch.__version__}")
    names = list(rows["bf16"])
    print(f"{'':8}" + "".join(f"{name:>16}" for name in names) + f"{'RSS grown MiB':>16}{'weights MiB':>14}")
    for fmt in FORMATS:
        values = "".join(f"{statistics.median(rows[fmt][name]):16.3f}" for name in names)
        print(f"{fmt:8}{values}{memory[fmt][0]:16.0f}{memory[fmt][1]:14.0f}", flush=True)
    kernel_table(runtimes)
    print(json.dumps({"load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

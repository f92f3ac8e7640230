"""kvgate's kquant kernel (kvgate.models.cpu_kernels.kquant) on GGUF blocks against torch's int4pack
and bf16 matmuls, at SmolLM2-135M's shapes.

Each layer's four linears (qkv 960x576, o 576x576, gate_up 3072x576, down 576x1536; N x K) come in
30 distinct copies, so every call streams its weight from memory as decode does. The K-quants need
K a multiple of 256, so they run on the same shapes with K 576 rounded up to 768 (their row marks
it). Times are medians, interleaved per repeat; ms per 30 layers, and the GB/s of weight bytes that
implies. ``kquant-q8a`` rows are the int8-activation arithmetic (``kquant_kernel("q8a")``) on the
same weights. Usage: python bench/bench_kquant.py [--threads 2] [--repeats 5] [--rows 1,8,64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from kvgate.models.cpu_kernels.kquant import Q8A_TYPES, TYPES, kquant_kernel
from kvgate.models.cpu_kernels.kquant_samples import random_blocks

LAYER_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))
COPIES = 30
GROUP = 32


def k_shape(type_name: str, cols: int) -> int:
    block = TYPES[type_name][1]
    return -(-cols // block) * block


def contenders(generator: torch.Generator) -> dict:
    """name: list of (call taking the row count's inputs, K, weight bytes), one per linear and copy"""
    out: dict = {"bf16 F.linear": [], "torch int4pack g32 (bf16 x)": []}
    out.update({f"kquant {name}": [] for name in TYPES})
    out.update({f"kquant-q8a {name}": [] for name in Q8A_TYPES})
    kernel, q8a = kquant_kernel(), kquant_kernel("q8a")
    for n, k in LAYER_SHAPES:
        for _ in range(COPIES):
            w = torch.randn(n, k, generator=generator).bfloat16()
            out["bf16 F.linear"].append((lambda x, w=w: F.linear(x, w), k, w.numel() * 2))
            q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=generator)
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
            sz = torch.randn(k // GROUP, n, 2, generator=generator).bfloat16()
            int4 = torch.ops.aten._weight_int4pack_mm_for_cpu
            out["torch int4pack g32 (bf16 x)"].append((lambda x, p=packed, sz=sz: int4(x, p, GROUP, sz), k, n * k // 2))
            for name in TYPES:
                kk = k_shape(name, k)
                raw = random_blocks(name, n, kk, generator)
                call = lambda x, raw=raw, name=name, n=n: kernel.matmul(x, raw, name, n)  # noqa: E731
                out[f"kquant {name}"].append((call, kk, raw.numel()))
                if name in Q8A_TYPES:
                    call = lambda x, raw=raw, name=name, n=n: q8a.matmul(x, raw, name, n)  # noqa: E731
                    out[f"kquant-q8a {name}"].append((call, kk, raw.numel()))
    return out


def time_rows(rows: int, calls: dict, repeats: int) -> dict:
    inputs = {k: torch.randn(rows, k).bfloat16() for k in {768, 576, 1536}}
    seconds: dict = {name: [] for name in calls}
    for _ in range(repeats):
        for name, linears in calls.items():
            start = time.perf_counter()
            for call, k, _ in linears:
                call(inputs[k])
            seconds[name].append(time.perf_counter() - start)
    result = {}
    for name, linears in calls.items():
        ms = statistics.median(seconds[name]) * 1e3
        gigabytes = sum(size for _, _, size in linears) / 1e9
        result[name] = {"ms_per_30_layers": round(ms, 2), "weight_GB_per_s": round(gigabytes / ms * 1e3, 1)}
    return {"rows": rows, "results": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", default="1,8,64")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernel = kquant_kernel()
    if kernel is None:
        raise SystemExit("kquant kernel not available on this machine")
    calls = contenders(torch.Generator().manual_seed(0))
    print(json.dumps({"variant": kernel.variant, "q8a_variant": kquant_kernel("q8a").variant,
                      "threads": args.threads}))
    for rows in (int(r) for r in args.rows.split(",")):
        print(json.dumps(time_rows(rows, calls, args.repeats), indent=1))


if __name__ == "__main__":
    main()

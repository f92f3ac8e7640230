"""The own CPU kernels (kvgate.models.cpu_kernels) against the torch kernels they replace, same bits.

For SmolLM2-135M's shapes (the four int4 linears of a layer, 30 distinct copies each so every call
streams its weight from memory as decode does; and the 49152 x 576 int8 head) this times torch's
``_weight_int4pack_mm_for_cpu`` / ``_weight_int8pack_mm`` and the own kernel interleaved, at 1 to
256 activation rows, and prints medians and the ratio (torch / own: above 1 the own kernel is
faster). Every timed output is also checked to be bit-identical. Usage:
python bench/bench_cpu_kernels.py [--threads 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from kvgate.models.cpu_kernels.int4 import GROUP, int4_kernel
from kvgate.models.cpu_kernels.int8 import int8_kernel

LAYER_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # qkv, o, gate_up, down: (N, K)
HEAD = (49152, 576)
COPIES = 30


def int4_weights(generator):
    weights = []
    for out_features, cols in LAYER_SHAPES:
        for _ in range(COPIES):
            q = torch.randint(0, 16, (out_features, cols), dtype=torch.int32, generator=generator)
            weights.append((torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1),
                            torch.randn(cols // GROUP, out_features, 2, generator=generator).bfloat16(), out_features, cols))
    return weights


def time_int4(rows: int, weights, kernel, repeats: int) -> dict:
    inputs = {cols: torch.randn(rows, cols).bfloat16() for cols in {c for _, c in LAYER_SHAPES}}
    torch_s, own_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        expected = [torch.ops.aten._weight_int4pack_mm_for_cpu(inputs[c], p, GROUP, sz) for p, sz, _, c in weights]
        middle = time.perf_counter()
        got = [kernel(inputs[c], p, sz, n) for p, sz, n, c in weights]
        end = time.perf_counter()
        torch_s.append(middle - start)
        own_s.append(end - middle)
        assert all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(expected, got))
    return summary(rows, torch_s, own_s, "ms per 30 layers")


def time_int8(rows: int, kernel, repeats: int, generator) -> dict:
    q = torch.randint(-127, 128, HEAD, dtype=torch.int8, generator=generator)
    scales = torch.rand(HEAD[0], generator=generator).bfloat16()
    x = torch.randn(rows, HEAD[1], generator=generator).bfloat16()
    torch_s, own_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        expected = torch.ops.aten._weight_int8pack_mm(x, q, scales)
        middle = time.perf_counter()
        got = kernel(x, q, scales)
        end = time.perf_counter()
        torch_s.append(middle - start)
        own_s.append(end - middle)
        assert torch.equal(expected.view(torch.int16), got.view(torch.int16))
    return summary(rows, torch_s, own_s, "ms per call")


def summary(rows: int, torch_s: list[float], own_s: list[float], unit: str) -> dict:
    t, o = statistics.median(torch_s) * 1e3, statistics.median(own_s) * 1e3
    return {"rows": rows, "torch_ms": round(t, 2), "own_ms": round(o, 2), "torch_over_own": round(t / o, 2), "unit": unit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    int4, int8 = int4_kernel(), int8_kernel()
    if int4 is None or int8 is None:
        raise SystemExit("the own kernels are not in use on this machine (no compiler, or torch's arithmetic differs)")
    generator = torch.Generator().manual_seed(0)
    weights = int4_weights(generator)
    results = {"threads": args.threads, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
               "int4_layer_linears": [time_int4(rows, weights, int4, args.repeats) for rows in (1, 2, 4, 8, 16, 64, 256)],
               "int8_head": [time_int8(rows, int8, args.repeats, generator) for rows in (1, 2, 8)]}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

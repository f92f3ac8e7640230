"""Fence bench on the embedded SmolLM2: validity of tool calls and structured output, fence cost.

For each dialect (ChatML JSON, GLM XML, DeepSeek DSML, Qwen3-Coder XML, DeepSeek V3.1 and R1, Kimi K2,
harmony, Gemma 4, MiniMax M2 -- all rendered for SmolLM2's tokenizer) and
each mode (tool_choice auto / required / named, response_format json_schema / json_object), the
requests run through the real engine (continuous batch, prefix cache on the device tier) in three
arms: fence on without speculation (``--main`` prompts per mode), fence on with n-gram
speculation and fence off (``--side`` prompts per mode each). Reported per cell:

* valid: outputs whose calls (or JSON answer) parse with the dialect's parser and validate
  against the schema, over the outputs that must hold one (auto: over outputs that attempted a
  call; a call cut off by max_tokens counts as invalid); plain: auto outputs that are plain text;
  canonical: outputs whose tokens are the tokenizer's own split of their text;
* fence cost per decode step (apply + advance, p50 / p99, microseconds); decode tokens per second
  of the batch. Speed is measured separately at batch 1 (``--speed`` prompts per arm).

Writes bench/out/fence.md (markdown) and bench/out/fence.json, and prints the markdown.

    python bench/bench_fence.py                                  # the full run (~30 min, 2 cores)
    python bench/bench_fence.py --main 4 --side 2 --speed 1 --out /tmp/fence   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.fence_report import markdown  # noqa: E402
from bench.fence_timing import Timings, load, prefix_cache, run_cell  # noqa: E402
from bench.fence_workload import DIALECTS, MAX_TOKENS, MODES, build_requests, judge  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def arms(args) -> list[tuple[str, bool, int, int]]:
    """(arm name, fenced, speculative draft length, prompts per mode)."""
    return [("fence", True, 0, args.main), ("fence+spec", True, args.speculative, args.side),
            ("no fence", False, 0, args.side)]


def validity(args, runtime, info, pm, cache) -> list[dict]:
    rows = []
    for dialect in args.dialects.split(","):
        for mode in args.modes.split(","):
            for arm, fenced, spec, count in arms(args):
                requests = build_requests(dialect, mode, count, random.Random(7))
                timings, started = Timings(), time.perf_counter()
                limit = args.max_tokens or MAX_TOKENS[dialect]
                outputs = run_cell(runtime, info, pm, dialect, requests, limit, fenced, spec, args.batch, timings, cache)
                row = {"dialect": dialect, "mode": mode, "arm": arm, "batch": args.batch, "max_tokens": limit,
                       **judge(dialect, mode, requests, outputs, runtime),
                       **timings.summary(time.perf_counter() - started)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def speed(args, runtime, info, pm, cache) -> list[dict]:
    """Batch 1, one sequence at a time: decode tokens/s and fence cost, fence on / off, speculation."""
    rows = []
    requests = build_requests("chatml_json", "required", args.speed, random.Random(11))
    for arm, fenced, spec in (("no fence", False, 0), ("fence", True, 0), ("fence+spec", True, args.speculative)):
        timings, started = Timings(), time.perf_counter()
        run_cell(runtime, info, pm, "chatml_json", requests, MAX_TOKENS["chatml_json"], fenced, spec, 1, timings, cache)
        row = {"arm": arm, "prompts": len(requests), **timings.summary(time.perf_counter() - started)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--main", type=int, default=40, help="prompts per mode, fence on, no speculation")
    parser.add_argument("--side", type=int, default=30, help="prompts per mode, fence+speculation and no fence")
    parser.add_argument("--speed", type=int, default=4, help="prompts per arm of the batch-1 speed runs")
    parser.add_argument("--max-tokens", type=int, default=0, help="0: per dialect (fence_workload.MAX_TOKENS)")
    parser.add_argument("--dialects", default=",".join(DIALECTS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--speculative", type=int, default=4, help="draft length of the speculative runs")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--out", default=OUT, help="folder for fence.md and fence.json (quick looks: elsewhere)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads or max(1, os.cpu_count() or 1))
    runtime, info, pm = load(args.dtype)
    cache = prefix_cache(runtime, pm)
    load_before, started = os.getloadavg(), time.perf_counter()
    rows = validity(args, runtime, info, pm, cache)
    speeds = speed(args, runtime, info, pm, cache) if args.speed else []
    context = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_before": load_before, "load_after": os.getloadavg(),
               "cores": os.cpu_count(), "threads": torch.get_num_threads(), "wall_s": time.perf_counter() - started,
               "args": vars(args)}
    text = markdown(rows, speeds, context)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fence.md"), "w") as handle:
        handle.write(text)
    with open(os.path.join(args.out, "fence.json"), "w") as handle:
        json.dump({"context": context, "validity": rows, "speed": speeds}, handle, indent=1)
    print(text)


if __name__ == "__main__":
    main()

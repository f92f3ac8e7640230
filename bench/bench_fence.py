"""Fence bench on the embedded SmolLM2: validity of tool calls and structured output, fence cost.

For each dialect (ChatML JSON, GLM XML, DeepSeek DSML -- all rendered for SmolLM2's tokenizer)
and each mode (tool_choice auto / required / named, and response_format json_schema), N prompts
run through the real engine with the fence on and off, speculation on and off. Reported per cell:

* valid: outputs whose calls (or JSON answer) parse with the dialect's parser and validate
  against the schema, over the outputs that must hold one (auto: over outputs that attempted a
  call; a call cut off by max_tokens counts as invalid); text: auto outputs that are plain text;
* fence cost per decode step (apply + advance, p50 / p99, microseconds) and its share of the
  forward pass time; decode tokens per second.

    python bench/bench_fence.py --prompts 200 --max-tokens 96          # the full run
    python bench/bench_fence.py --prompts 8 --dialects chatml_json     # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.fence_workload import DIALECTS, MODES, build_requests, judge  # noqa: E402
from bench.fence_timing import Timings, run_cell  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--dialects", default=",".join(DIALECTS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--speculative", type=int, default=4, help="draft length of the speculative runs")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", default="", help="write the results here too")
    parser.add_argument("--no-unfenced", action="store_true", help="skip the runs without a fence")
    parser.add_argument("--unfenced-speculative", action="store_true",
                        help="also run without a fence with speculation (validity as without it under greedy)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from bench.fence_timing import load

    runtime, info, pm = load(args.dtype)
    results = []
    for dialect_name in args.dialects.split(","):
        for mode in args.modes.split(","):
            requests = build_requests(dialect_name, mode, args.prompts, random.Random(7))
            for fenced in ([True] if args.no_unfenced else [True, False]):
                for spec in (0, args.speculative) if (fenced or args.unfenced_speculative) else (0,):
                    timings = Timings()
                    started = time.perf_counter()
                    outputs = run_cell(runtime, info, pm, dialect_name, requests, args.max_tokens, fenced,
                                       spec, args.batch, timings)
                    wall = time.perf_counter() - started
                    row = {"dialect": dialect_name, "mode": mode, "fence": fenced, "speculative": spec,
                           **judge(dialect_name, mode, requests, outputs, runtime), **timings.summary(wall)}
                    results.append(row)
                    print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()

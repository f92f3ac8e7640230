"""What the deterministic mode (``engine.deterministic``) costs, on the runtime alone.

Two SmolLM2-135M bf16 runtimes share the weights' cache: the default attention and the batch- and
split-invariant one. For each measure the two run interleaved, ``--repeats`` times, and the script
prints medians and the ratio deterministic / default (above 1 = slower):
cold prefill at 512 / 2,048 / 8,000 tokens (one forward), a hit's append of 213 tokens onto 3,000,
and decode at batch 1 and batch 8 (tokens per second, 32 steps, ~1,000 tokens of context each).
``--model`` measures another runtime the same way: a Hugging Face directory (DeepSeek V3.2 and V4
included; a tiny random one is written by ``--tiny deepseek_v32`` / ``--tiny deepseek_v4`` from the
tests' checkpoints). Measures longer than the model's context are left out.

``--family NAME`` measures one registered runtime (``all``: every one, llama being SmolLM2 itself) on
a mid-size random checkpoint (bench/family_checkpoints.py: hidden 512, real head dims, 32 experts,
25-70 MFLOP per token, written once and cached): cold prefill of 512 and 2,048 tokens, decode at
batch 1 and 8 over ~1,000 tokens; ``--quick`` (repeats 1, 64 tokens, 4 steps) and ``--small`` (widths
/ 4) make a smoke test. Decode ratios are of rates (below 1 = slower), prefill ratios of seconds.
Every runtime's cost, on a quiet machine: ``python bench/bench_deterministic.py --family all``;
expect 30-45 minutes at 2 threads. Per family (~40 MFLOP/token), per mode and repeat: ~100 GFLOP
of timed prefill, ~360 GFLOP of untimed decode context (9 x ~1,000 tokens) and 288 decode steps'
tokens, i.e. ~3 TFLOP for 2 modes x 3 repeats, ~1.5-2 min at 30-50 GFLOP/s, plus ~10 s to write
the checkpoint once; SmolLM2 (270 MFLOP/token) ~5 min of it; plus waits for a quiet CPU.
Usage: python bench/bench_deterministic.py [--repeats 3] [--threads 2] [--model DIR | --tiny NAME |
       --family NAME|all [--quick] [--small]]
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

from bench_hit_floor import timed_prefill  # noqa: E402
from bench_runtime import wait_for_quiet  # noqa: E402
from family_checkpoints import FAMILIES, checkpoint, flops_per_token  # noqa: E402
from family_measures import family_measures  # noqa: E402


def load(deterministic: bool, weights: str, model: str = ""):
    from kvgate.core.config import Config, EngineConfig, ModelConfig
    from kvgate.core.loading.model_loading import load_runtime as load_any
    from kvgate.core.plugins import build_plugin_manager
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    cache_dir = os.path.join(tempfile.gettempdir(), "kvgate-bench-models")
    engine = EngineConfig(deterministic=deterministic)
    if model:  # the runtime that declares the directory's architecture, at its own context
        config = Config(state_dir=cache_dir, model=ModelConfig(path=model, dtype="bf16", weights=weights), engine=engine)
        return load_any(config, build_plugin_manager())
    return load_runtime(resolve_source(""), ModelConfig(dtype="bf16", max_context=8192, weights=weights), engine,
                        cache_dir)


def tiny_checkpoint(name: str) -> str:
    """A tiny random ``deepseek_v32`` or ``deepseek_v4`` directory, as the tests write it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    directory = Path(tempfile.mkdtemp(prefix=f"kvgate-bench-{name}-")) / name
    if name == "deepseek_v4":
        from tests.models.test_deepseek_v4_server import write_checkpoint
        return str(write_checkpoint(directory))
    from tests.models.test_families_server import write_checkpoint
    return str(write_checkpoint(directory, name))


def decode_rate(runtime, prompts: list[list[int]], steps: int = 32) -> float:
    """Aggregate tokens per second of ``steps`` batched decode steps over sessions of ``prompts``."""
    sessions = [runtime.new_session() for _ in prompts]
    try:
        for session, prompt in zip(sessions, prompts):
            runtime.prefill(session, prompt)
        tokens = [p[-1] for p in prompts]
        started = time.perf_counter()
        for _ in range(steps):
            tokens = runtime.decode(sessions, tokens).argmax(-1).tolist()
        return steps * len(prompts) / (time.perf_counter() - started)
    finally:
        for session in sessions:
            runtime.release(session)


def measures(ids: list[int], context: int) -> dict:
    """The measures whose tokens fit ``context`` (decode over ~1,000 tokens, or half a shorter context)."""
    decode_tokens = min(1000, context // 2)
    needs = [512, 2048, 8000, 3213, decode_tokens, decode_tokens]
    return {name: measure for need, (name, measure) in zip(needs, _measures(ids, decode_tokens).items())
            if need <= context}


def _measures(ids: list[int], decode_tokens: int) -> dict:
    return {
        "cold prefill 512 (s)": lambda rt: timed_prefill(rt, ids[:512], 0),
        "cold prefill 2,048 (s)": lambda rt: timed_prefill(rt, ids[:2048], 0),
        "cold prefill 8,000 (s)": lambda rt: timed_prefill(rt, ids[:8000], 0),
        "hit append 213 onto 3,000 (s)": lambda rt: timed_prefill(rt, ids[:3213], 3000),
        "decode batch-1 (tok/s)": lambda rt: decode_rate(rt, [ids[:decode_tokens]]),
        "decode batch-8 (tok/s)": lambda rt: decode_rate(rt, [ids[i * 7:i * 7 + decode_tokens - 37 * i]
                                                              for i in range(8)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", default="auto", help="[model] weights of both runtimes")
    parser.add_argument("--model", default="", help="a Hugging Face directory (default: the embedded SmolLM2)")
    parser.add_argument("--tiny", choices=["deepseek_v32", "deepseek_v4"], help="a tiny random checkpoint instead")
    parser.add_argument("--family", choices=["all", "llama", *FAMILIES], help="a mid-size random checkpoint instead")
    parser.add_argument("--quick", action="store_true", help="[family] repeats 1, short measures (a smoke test)")
    parser.add_argument("--small", action="store_true", help="[family] widths / 4 (a smoke test)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.family:
        for name in (["llama", *FAMILIES] if args.family == "all" else [args.family]):
            try:
                measure_family(name, args)
            except Exception as error:  # noqa: BLE001 (one family failing leaves the others' numbers)
                if args.family != "all":
                    raise
                print(f"# {name}: failed: {type(error).__name__}: {error}", flush=True)
        return
    model = tiny_checkpoint(args.tiny) if args.tiny else args.model
    runtimes = {"default": load(False, args.weights, model), "deterministic": load(True, args.weights, model)}
    print_header(runtimes, args, runtimes["default"].info.architecture if model else "SmolLM2-135M")
    compare(runtimes, measures(token_ids(runtimes), runtimes["default"].info.max_context), args.repeats)


def measure_family(name: str, args) -> None:
    """The family's mid-size checkpoint (SmolLM2 itself for llama), measured by :func:`family_measures`."""
    model = "" if name == "llama" else checkpoint(name, args.small)
    runtimes = {"default": load(False, args.weights, model), "deterministic": load(True, args.weights, model)}
    flops = f", {flops_per_token(name, args.small) / 1e6:.0f} MFLOP/token" if model else ""
    print_header(runtimes, args, f"{name} ({runtimes['default'].info.architecture if model else 'SmolLM2-135M'}"
                                 f"{flops})")
    chosen = family_measures(token_ids(runtimes), runtimes["default"].info.max_context, args.quick)
    compare(runtimes, chosen, 1 if args.quick else args.repeats, quiet=not args.quick)


def token_ids(runtimes: dict) -> list[int]:
    rng = random.Random(0)
    ids = [rng.randrange(100, runtimes["default"].info.vocab_size) for _ in range(8000)]
    for runtime in runtimes.values():
        timed_prefill(runtime, ids[:512], 256)  # warm-up
    return ids


def print_header(runtimes: dict, args, what: str) -> None:
    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {args.threads} threads, "
          f"median of {1 if args.quick else args.repeats}, {what}")
    print("| measure | default | deterministic | deterministic / default |\n| --- | --- | --- | --- |", flush=True)


def compare(runtimes: dict, chosen: dict, repeats: int, quiet: bool = True) -> None:
    """Each measure ``repeats`` times, the modes interleaved; medians and their ratio as a table row."""
    for name, measure in chosen.items():
        samples: dict[str, list[float]] = {mode: [] for mode in runtimes}
        for _ in range(repeats):
            for mode, runtime in runtimes.items():
                if quiet:
                    wait_for_quiet()
                samples[mode].append(measure(runtime))
        default, exact = (statistics.median(samples[m]) for m in ("default", "deterministic"))
        print(f"| {name} | {default:.3f} | {exact:.3f} | {exact / default:.2f} |", flush=True)

if __name__ == "__main__":
    main()

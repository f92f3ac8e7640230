"""kvgate's Llama runtime against Hugging Face transformers, side by side, on SmolLM2-135M (bf16).

Prints prefill tokens/s at 512, 2,048 and 8,000 tokens and batch-1 decode tokens/s for both (medians
of 3), their ratio, kvgate's aggregate batch-8 decode, the date and how busy the CPU was.
Usage: python bench/bench_runtime.py [--threads 2] [--sizes 512,2048,8000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import tempfile
import time

import torch


def cpu_busy(seconds: float = 0.5) -> float:
    """Percent of all CPUs busy over ``seconds`` (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
        return sum(values), values[3] + values[4]
    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 100.0 * (1 - (idle1 - idle0) / max(1, total1 - total0))


def wait_for_quiet(limit_s: float = 20.0, busy_below: float = 25.0) -> float:
    deadline = time.monotonic() + limit_s
    busy = cpu_busy()
    while busy >= busy_below and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def interleaved_rates(runs, tokens: int, repeats: int, loads: list[float]) -> list[float]:
    """Median tokens/s of each run, the runs alternating within every repeat (same machine state)."""
    rates: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for index, run in enumerate(runs):
            loads.append(wait_for_quiet())
            started = time.perf_counter()
            run()
            rates[index].append(tokens / (time.perf_counter() - started))
    return [statistics.median(r) for r in rates]


class KvgateSide:
    def __init__(self, runtime):
        self.runtime = runtime

    def prefill(self, ids, chunk=None):
        session = self.runtime.new_session()
        chunk = chunk or len(ids)
        for start in range(0, len(ids), chunk):  # the engine's serving path prefills in chunks
            self.runtime.prefill(session, ids[start:start + chunk])
        self.runtime.release(session)

    def decode(self, ids, steps, batch=1):
        sessions = [self.runtime.new_session() for _ in range(batch)]
        logits = torch.stack([self.runtime.prefill(s, ids[: len(ids) - i]) for i, s in enumerate(sessions)])
        started = time.perf_counter()
        for _ in range(steps):
            logits = self.runtime.decode(sessions, logits.argmax(-1).tolist())
        elapsed = time.perf_counter() - started
        for session in sessions:
            self.runtime.release(session)
        return batch * steps / elapsed


class TransformersSide:
    def __init__(self, model):
        self.model = model

    @torch.inference_mode()
    def prefill(self, ids):
        self.model(torch.tensor([ids]), logits_to_keep=1)

    @torch.inference_mode()
    def decode(self, ids, steps, batch=1):
        from transformers import DynamicCache

        cache = DynamicCache()
        out = self.model(torch.tensor([ids]), cache=cache, logits_to_keep=1, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        started = time.perf_counter()
        for _ in range(steps):
            out = self.model(token, cache=cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
        return steps / (time.perf_counter() - started)


def load_sides(cache_dir: str):
    from transformers import AutoModelForCausalLM

    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.gguf_cache import converted_directory
    from kvgate.models.loading import load_runtime
    from kvgate.models.progress import Progress

    source = resolve_source("")
    runtime = load_runtime(source, ModelConfig(dtype="bf16", weights="bf16"), EngineConfig(kv_pool_tokens=8 * 8192),
                           cache_dir)  # dense, as transformers runs it (bench_weights.py compares the formats)
    converted = converted_directory(source.path, "bf16", cache_dir, Progress("transformers"))
    model = AutoModelForCausalLM.from_pretrained(str(converted), dtype=torch.bfloat16).eval()
    return KvgateSide(runtime), TransformersSide(model), runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="512,2048,8000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--chunk", type=int, default=512, help="the engine's prefill_chunk (used while others decode)")
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "kvgate-bench-models"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kvgate, hf, runtime = load_sides(args.cache_dir)
    rng = random.Random(0)
    ids = [rng.randrange(100, runtime.info.vocab_size) for _ in range(8192)]
    kvgate.prefill(ids[:64]), hf.prefill(ids[:64])  # warm-up
    loads: list[float] = []
    print(f"\nkvgate runtime vs transformers, SmolLM2-135M bf16, {args.threads} threads, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}, torch {torch.__version__}")
    print(f"{'':26}{'kvgate':>10}{'transformers':>14}{'ratio':>8}", flush=True)
    for size in [int(s) for s in args.sizes.split(",")]:
        ours, chunked, theirs = interleaved_rates(
            [lambda: kvgate.prefill(ids[:size]), lambda: kvgate.prefill(ids[:size], chunk=args.chunk),
             lambda: hf.prefill(ids[:size])], size, args.repeats, loads)
        print(f"{f'prefill {size} tok/s':26}{ours:10.1f}{theirs:14.1f}{ours / theirs:8.2f}  (alone: one forward)",
              flush=True)
        print(f"{f'  chunked by {args.chunk}':26}{chunked:10.1f}{theirs:14.1f}{chunked / theirs:8.2f}"
              "  (while others decode)", flush=True)
    prompt, steps = ids[:128], args.decode_steps
    loads.append(wait_for_quiet())
    single = statistics.median(kvgate.decode(prompt, steps) for _ in range(args.repeats))
    theirs = statistics.median(hf.decode(prompt, steps) for _ in range(args.repeats))
    print(f"{'decode batch-1 tok/s':26}{single:10.1f}{theirs:14.1f}{single / theirs:8.2f}", flush=True)
    batch8 = statistics.median(kvgate.decode(prompt, steps, batch=8) for _ in range(args.repeats))
    print(f"{'decode batch-8 aggregate':26}{batch8:10.1f}{'':14}{batch8 / single:8.2f} (x kvgate batch-1)")
    print(f"CPU busy before runs (all cores): min {min(loads):.0f}%, median {statistics.median(loads):.0f}%, "
          f"max {max(loads):.0f}%; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

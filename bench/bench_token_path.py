"""What the serving path costs per token: the runtime's own batch-1 decode against the same decode
through the HTTP server, side by side, and whether a token costs more late in a long output.

- ``runtime``: the engine's model alone, in this process (the server's defaults: bf16 activations,
  ``model.weights = "auto"``, ``engine.deterministic = true``), one greedy token at a time from the
  logits of the last, as the engine feeds it.
- ``server``: ``kvgate serve`` on the same defaults (prefix cache off), one streaming Chat
  Completions request with ``ignore_eos``; tokens/s from the first content chunk to the last.

Both decode ``--tokens`` tokens after the same ~``--context``-token prompt, interleaved,
``--repeats`` times; the script prints medians and server / runtime. For the long-output check the
server streams ``--long`` tokens and the runtime decodes as many; the script prints the median time
per token over the first and the last 10 % of each, and their difference, the serving path's cost
per token (one that grew with the output would be larger late than early; the model's own step
grows with the context on both sides).

    python bench/bench_token_path.py [--context 1000] [--tokens 128] [--long 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_decode_http import context_chat  # noqa: E402
from tests.harness import ServerProcess  # noqa: E402


def load_runtime():
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime as load

    cache_dir = os.path.join(tempfile.gettempdir(), "kvgate-bench-models")
    return load(resolve_source(""), ModelConfig(), EngineConfig(), cache_dir)


def runtime_steps(runtime, prompt: list[int], tokens: int) -> list[float]:
    """Seconds of each greedy batch-1 decode step of the runtime alone, after a prefill of ``prompt``."""
    session = runtime.new_session()
    try:
        token = int(runtime.prefill(session, prompt).argmax())
        times = [time.perf_counter()]
        for _ in range(tokens - 1):
            token = int(runtime.decode([session], [token])[0].argmax())
            times.append(time.perf_counter())
        return [b - a for a, b in zip(times, times[1:])]
    finally:
        runtime.release(session)


def runtime_rate(runtime, prompt: list[int], tokens: int) -> float:
    return (tokens - 1) / sum(runtime_steps(runtime, prompt, tokens))


def chunk_times(base_url: str, messages: list[dict], tokens: int) -> list[float]:
    """Arrival time of every streamed content chunk of one greedy request."""
    body = {"model": "smollm2", "messages": messages, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    times = []
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=900) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {") and any(
                    (choice.get("delta") or {}).get("content") for choice in json.loads(line[6:])["choices"]):
                times.append(time.perf_counter())
    return times


def server_rate(base_url: str, messages: list[dict], tokens: int) -> float:
    times = chunk_times(base_url, messages, tokens)
    return (len(times) - 1) / (times[-1] - times[0])


def early_and_late(gaps: list[float]) -> tuple[float, float]:
    """Median of the first and of the last 10 % of ``gaps``, in ms."""
    tenth = max(len(gaps) // 10, 1)
    return 1000 * statistics.median(gaps[:tenth]), 1000 * statistics.median(gaps[-tenth:])


def prompt_ids(base_url: str, messages: list[dict]) -> list[int]:
    reply = httpx.post(base_url + "/v1/tokenize", json={"messages": messages, "add_generation_prompt": True},
                       timeout=120)
    reply.raise_for_status()
    return reply.json()["tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--long", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp), {"cache": {"enabled": False}}) as server:
        runtime = load_runtime()
        messages = context_chat(server.base_url, args.context)
        prompt = prompt_ids(server.base_url, messages)
        runtime_rate(runtime, prompt[:64], 8), server_rate(server.base_url, messages[:1], 8)  # warm-up
        rates: dict[str, list[float]] = {"runtime": [], "server": []}
        for _ in range(args.repeats):
            rates["runtime"].append(runtime_rate(runtime, prompt, args.tokens))
            rates["server"].append(server_rate(server.base_url, messages, args.tokens))
            print(f"  runtime {rates['runtime'][-1]:6.1f} tok/s   server {rates['server'][-1]:6.1f} tok/s", flush=True)
        times = chunk_times(server.base_url, messages, args.long)
        served = early_and_late([b - a for a, b in zip(times, times[1:])])
        alone = early_and_late(runtime_steps(runtime, prompt, args.long))
    runtime_median, server_median = (statistics.median(rates[name]) for name in ("runtime", "server"))
    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}, {torch.get_num_threads()} threads, {len(prompt)} prompt "
          f"tokens, {args.tokens} decoded, median of {args.repeats}")
    print(f"batch-1 decode: runtime {runtime_median:.1f} tok/s, server {server_median:.1f} tok/s, "
          f"server / runtime {server_median / runtime_median:.3f}")
    print(f"{args.long}-token output, median ms per token over its first / last 10 %: server {served[0]:.2f} / "
          f"{served[1]:.2f}, runtime {alone[0]:.2f} / {alone[1]:.2f}; serving cost per token "
          f"{served[0] - alone[0]:.2f} / {served[1] - alone[1]:.2f} ms")


if __name__ == "__main__":
    main()

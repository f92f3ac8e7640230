"""Decode throughput through the real HTTP server vs Hugging Face transformers, side by side.

kvgate: batch-1 decode tokens/s (one streaming request) and aggregate decode tokens/s with N
concurrent streaming requests. transformers (bf16, same weights via the converted cache): batch-1
and batch-N `generate`. Medians of --repeats runs; prints ratios.

    python bench/bench_decode_http.py [--tokens 96] [--concurrency 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness import ServerProcess  # noqa: E402

PROMPTS = [
    "Write a long story about a dragon who learns to cook.",
    "Explain how a steam engine works, step by step.",
    "Describe a day in the life of a lighthouse keeper.",
    "Write a travel guide for a city on the moon.",
    "Tell the history of the printing press in detail.",
    "Write a letter from a cat to its owner.",
    "Describe the water cycle to a ten-year-old.",
    "Write a recipe for a soup made of stars.",
]


def stream_one(base_url: str, prompt: str, tokens: int) -> tuple[float, float, int]:
    """(first token time, last token time, tokens) for one streaming request."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": 0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    first = last = 0.0
    count = 0
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                count = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                last = time.monotonic()
                first = first or last
    return first, last, count


def kvgate_decode(base_url: str, concurrency: int, tokens: int) -> float:
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        runs = list(pool.map(lambda i: stream_one(base_url, PROMPTS[i % len(PROMPTS)], tokens), range(concurrency)))
    decoded = sum(count - 1 for _, _, count in runs)  # tokens after each request's first
    return decoded / (max(last for _, last, _ in runs) - min(first for first, _, _ in runs))


def transformers_decode(model_dir: str, concurrency: int, tokens: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).eval()
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], tokenize=False,
                                           add_generation_prompt=True) for i in range(concurrency)]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        model.generate(**batch, max_new_tokens=1, do_sample=False)
        started = time.monotonic()
        model.generate(**batch, max_new_tokens=1, do_sample=False)
        prefill = time.monotonic() - started
        started = time.monotonic()
        model.generate(**batch, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        elapsed = time.monotonic() - started - prefill
    return concurrency * (tokens - 1) / elapsed


def converted_model_dir(state_dir: Path) -> str:
    candidates = sorted((state_dir / "models").glob("*/config.json"))
    if not candidates:
        raise SystemExit("no converted model found in the server's state dir")
    return str(candidates[0].parent)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"# decode benchmark {datetime.datetime.now().isoformat(timespec='seconds')}, "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"engine": {"max_batch": max(16, args.concurrency)}, "cache": {"enabled": False}}
        results: dict[str, list[float]] = {}
        with ServerProcess(Path(tmp), settings) as server:
            stream_one(server.base_url, PROMPTS[0], 4)  # warm-up
            for _ in range(args.repeats):
                results.setdefault("kvgate batch-1", []).append(kvgate_decode(server.base_url, 1, args.tokens))
                results.setdefault(f"kvgate {args.concurrency} concurrent", []).append(
                    kvgate_decode(server.base_url, args.concurrency, args.tokens))
            model_dir = converted_model_dir(server.state_dir)
            server.stop()
            for _ in range(args.repeats):
                results.setdefault("transformers batch-1", []).append(transformers_decode(model_dir, 1, args.tokens))
                results.setdefault(f"transformers batch-{args.concurrency}", []).append(
                    transformers_decode(model_dir, args.concurrency, args.tokens))
    medians = {name: statistics.median(values) for name, values in results.items()}
    print("| measurement | decode tok/s (median) |\n| --- | --- |")
    for name, value in medians.items():
        print(f"| {name} | {value:.1f} |")
    names = list(medians)
    print(f"\nkvgate {args.concurrency}-concurrent / kvgate batch-1: {medians[names[1]] / medians[names[0]]:.2f}x")
    print(f"kvgate batch-1 / transformers batch-1: {medians[names[0]] / medians[names[2]]:.2f}x")
    print(f"kvgate {args.concurrency}-concurrent / transformers batch-{args.concurrency}: "
          f"{medians[names[1]] / medians[names[3]]:.2f}x")


if __name__ == "__main__":
    main()

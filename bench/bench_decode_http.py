"""Decode throughput through the real HTTP server vs llama.cpp's llama-server and transformers.

Measurements (each system gets the same prompts, interleaved run by run: A, B, C, A, B, C...):
  batch-1 @ N ctx   one streaming request whose prompt is about N tokens (``--contexts``, cut from
                    repeated prose to size with kvgate's tokenizer), ``--tokens`` tokens with ignore_eos
  K concurrent      K (``--concurrency``) streaming requests at once on short prompts, aggregate

Systems (``--systems``):
  kvgate          one ``kvgate serve`` (tests.harness.ServerProcess), prefix cache off
  llama-server    llama.cpp's server on the same GGUF (bench/llama_server.py builds it on first use,
                  ~11 minutes on 2 cores), one process per workload, flags printed at the start.
                  Skipped with a message when it cannot be built.
  transformers    bf16 ``generate`` in this process on kvgate's converted model (see TransformersPeer)
  kvgate-before   with ``--before DIR``: a second ``kvgate serve`` run from another checkout of kvgate
                  (e.g. a worktree of the previous commit), to measure a change against what it replaces

Both servers run on the same GGUF (``--gguf``: ``q4_1``, the embedded file, by default; ``q4_k_m``,
made from it by bench/llama_quantize.py; or a path) with the same ``--threads`` (kvgate's ``[model]
threads``, llama-server's ``-t`` and ``-tb``).

llama-server's flags per workload, and why they are its best for decode:
  batch-1         ``-np 1``: one slot holds the whole ``-c 8192`` (a 3K prompt fits; more slots only
                  split the context)
  K concurrent    ``-np K``: every stream gets a slot, so all K decode in one batch each step; 8,192 / K
                  tokens a slot hold the short prompts and 256 tokens
  both            its defaults otherwise: continuous batching on; ``-fa auto`` (flash attention where
                  the CPU backend supports it); ``-b 2048 -ub 512`` size prompt batches, not decode
                  steps. Its default OpenMP wait policy: ``OMP_WAIT_POLICY=PASSIVE`` cuts its decode
                  ~3x (issue 29) and is never set. peers.md's best figures were taken this way. A
                  check of ``-fa on`` / ``off`` on a busy machine said nothing (llama-server's spinning
                  threads collapse to a few tok/s when other work holds a core); ``--peer-flags "-fa
                  off"`` tries one on a quiet machine.

HTTP tokens/s are measured alike for every server: from the first streamed content token to the
last, over (completion tokens from usage - 1); the concurrent figure sums every stream's tokens
after its first over the span from the earliest first token to the latest last one. Prints medians
of ``--repeats`` runs, the ratios kvgate/llama-server and kvgate/transformers, and each system's
concurrent figure over its batch-1 figure at the first context. Batch-1 workloads also give the time
to the first token of a cold prompt (kvgate's cache is off; llama-server is sent ``"cache_prompt":
false``, else its slot would reuse the previous workload's prompt, whose prose starts the same way).

    python bench/bench_decode_http.py [--systems kvgate,llama-server,transformers] [--tokens 256]
        [--contexts 86,1000,3000] [--concurrency 8] [--repeats 3] [--gguf q4_1|q4_k_m|PATH]
        [--threads 2] [--peer-flags "..."] [--before DIR] [--native-layers]

Figures from a busy (shared) machine are not to be reported: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llama_quantize import resolve_gguf  # noqa: E402
from llama_server import PEER_DIR, LlamaServer, llama_server_available, merged_args  # noqa: E402
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
PROSE = (
    "The harbour town woke slowly in winter. Fishing boats rocked against the stone quay while gulls argued "
    "over the nets, and the baker on the corner pulled the first loaves from an oven that had burned since "
    "before dawn. Children walked to school along the sea wall, counting the waves that broke over the "
    "rocks, and the old lighthouse keeper climbed the spiral stairs one more time to polish the great lens. "
    "In the market square the merchants unfolded their stalls: wool and salt, lamp oil and rope, apples "
    "carried down from the orchards in the hills. Nobody hurried, because the ferry would not arrive until "
    "noon, and everyone knew that the weather, not the clock, decided when the day truly began. "
)
# (chats, tokens) -> (tok/s, prompt tokens, seconds to the first token of the first chat)
Decode = Callable[[list[list[dict]], int], tuple[float, int, float]]
# on every llama-server beside -np / -t / -tb: none, its defaults are its best (module docstring)
PEER_DECODE_FLAGS: list[str] = []


def user_chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def stream_one(base_url: str, messages: list[dict], tokens: int, extra: Optional[dict] = None
               ) -> tuple[float, float, float, int, int]:
    """(start, first content time, last content time, completion tokens, prompt tokens) of one
    streaming request; ``extra``: more fields of the request body."""
    started = time.monotonic()
    body = {"model": "smollm2", "messages": messages, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **(extra or {})}
    first = last = 0.0
    usage = {}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=900) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or []):
                last = time.monotonic()
                first = first or last
    return started, first, last, usage["completion_tokens"], usage["prompt_tokens"]


def http_decode(base_url: str, chats: list[list[dict]], tokens: int, extra: Optional[dict] = None
                ) -> tuple[float, int, float]:
    with concurrent.futures.ThreadPoolExecutor(len(chats)) as pool:
        runs = list(pool.map(lambda chat: stream_one(base_url, chat, tokens, extra), chats))
    decoded = sum(completion - 1 for _, _, _, completion, _ in runs)  # tokens after each stream's first
    span = max(last for _, _, last, _, _ in runs) - min(first for _, first, _, _, _ in runs)
    return decoded / span, runs[0][4], runs[0][1] - runs[0][0]


def prompt_token_count(base_url: str, messages: list[dict]) -> int:
    reply = httpx.post(base_url + "/v1/tokenize", json={"messages": messages, "add_generation_prompt": True},
                       timeout=120)
    reply.raise_for_status()
    return len(reply.json()["tokens"])


def context_chat(base_url: str, target: int) -> list[dict]:
    """The longest prose prefix whose templated prompt stays within ``target`` tokens (kvgate's count)."""
    words = (PROSE * (target // 100 + 2)).split()
    low, high = 1, len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if prompt_token_count(base_url, user_chat(" ".join(words[:middle]))) <= target:
            low = middle
        else:
            high = middle - 1
    return user_chat(" ".join(words[:low]))


class TransformersPeer:
    """bf16 transformers on kvgate's converted model folder; ``generate`` time less a 1-token prefill.

    That folder now keeps the linear weights packed as q4, which transformers does not read (its load
    report lists them MISSING and initialises them at random): this times the same shapes, not the
    same weights."""

    def __init__(self, model_dir: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16).eval()

    def decode(self, chats: list[list[dict]], tokens: int) -> tuple[float, int, float]:
        texts = [self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with self.torch.inference_mode():
            self.model.generate(**batch, max_new_tokens=1, do_sample=False)
            started = time.monotonic()
            self.model.generate(**batch, max_new_tokens=1, do_sample=False)
            prefill = time.monotonic() - started
            started = time.monotonic()
            self.model.generate(**batch, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
            elapsed = time.monotonic() - started - prefill
        return len(chats) * (tokens - 1) / elapsed, batch["input_ids"].shape[1], prefill


def converted_model_dir(state_dir: Path) -> str:
    candidates = sorted((state_dir / "models").glob("*/config.json"))
    if not candidates:
        raise SystemExit("no converted model found in the server's state dir")
    return str(candidates[0].parent)


def llama_server_flags(streams: int, threads: int, extra: Sequence[str] = ()) -> list[str]:
    """llama-server's flags for ``streams`` concurrent streams: its best for decode (module docstring)."""
    return ["-np", str(streams), "-t", str(threads), "-tb", str(threads), *PEER_DECODE_FLAGS, *extra]


def start_llama_servers(stack: contextlib.ExitStack, gguf: str, args) -> Decode:
    """One llama-server for batch-1 and one for the concurrent runs, each on its own best flags."""
    servers, concurrency = {}, args.concurrency
    for streams in (1, concurrency):
        flags = llama_server_flags(streams, args.threads, args.peer_flags.split())
        label = "batch-1" if streams == 1 else f"{concurrency} concurrent"
        print(f"# llama-server flags, {label}: {' '.join(merged_args(flags))}", flush=True)
        log_path = PEER_DIR / f"decode-np{streams}.log"
        servers[streams] = stack.enter_context(LlamaServer(flags, gguf=gguf, log_path=log_path))
    return lambda chats, tokens: http_decode(servers[1 if len(chats) == 1 else concurrency].base_url, chats, tokens,
                                             {"cache_prompt": False})  # a cold prompt every time, as kvgate's


def start_systems(names: list[str], stack: contextlib.ExitStack, tmp: Path, args) -> tuple[dict[str, Decode], str]:
    """The decode function of each system and kvgate's URL (its tokenizer sizes the prompts)."""
    settings = {"engine": {"max_batch": max(16, args.concurrency)}, "cache": {"enabled": False},
                "model": {"path": args.gguf, "threads": args.threads}}
    native = {"model": {**settings["model"], "native_layers": True}} if args.native_layers else {}
    kvgate = stack.enter_context(ServerProcess(tmp / "kvgate", {**settings, **native}))
    systems: dict[str, Decode] = {}
    if "kvgate" in names:
        systems["kvgate"] = lambda chats, tokens: http_decode(kvgate.base_url, chats, tokens)
    if args.before:
        before = stack.enter_context(ServerProcess(tmp / "kvgate-before", settings, env=checkout_env(args.before, tmp)))
        systems["kvgate-before"] = lambda chats, tokens: http_decode(before.base_url, chats, tokens)
    if "llama-server" in names and llama_server_available():
        systems["llama-server"] = start_llama_servers(stack, args.gguf, args)
    if "transformers" in names:
        systems["transformers"] = TransformersPeer(converted_model_dir(kvgate.state_dir)).decode
    return systems, kvgate.base_url


def checkout_env(checkout: str, tmp: Path) -> dict[str, str]:
    """The environment that makes ``import kvgate`` load the checkout at ``checkout`` (a folder named
    kvgate linked to it, first on PYTHONPATH)."""
    folder = tmp / "before-path"
    folder.mkdir()
    (folder / "kvgate").symlink_to(Path(checkout).resolve(), target_is_directory=True)
    return {"PYTHONPATH": str(folder)}


def workloads(base_url: str, contexts: list[int], concurrency: int) -> dict[str, list[list[dict]]]:
    chats = {f"batch-1 @ {target} ctx": [context_chat(base_url, target)] for target in contexts}
    chats[f"{concurrency} concurrent"] = [user_chat(PROMPTS[i % len(PROMPTS)]) for i in range(concurrency)]
    return chats


def measure(args) -> tuple[dict, dict, dict]:
    """{(workload, system): [tok/s per repeat]}, {(workload, system): prompt tokens} and
    {(workload, system): [seconds to the first token per repeat]} (batch-1 workloads)."""
    rates: dict[tuple[str, str], list[float]] = {}
    firsts: dict[tuple[str, str], list[float]] = {}
    prompt_tokens: dict[tuple[str, str], int] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        systems, kvgate_url = start_systems(args.systems.split(","), stack, Path(tmp), args)
        chats = workloads(kvgate_url, [int(c) for c in args.contexts.split(",")], args.concurrency)
        for decode in systems.values():
            decode([user_chat(PROMPTS[0])], 4)  # warm-up
        for _ in range(args.repeats):
            for workload, workload_chats in chats.items():
                for system, decode in systems.items():
                    rate, prompt, first = decode(workload_chats, args.tokens)
                    rates.setdefault((workload, system), []).append(rate)
                    prompt_tokens[(workload, system)] = prompt
                    if len(workload_chats) == 1:
                        firsts.setdefault((workload, system), []).append(first)
                    print(f"  {workload:<22} {system:<13} {rate:7.1f} tok/s  ({prompt} prompt tokens, first token "
                          f"{first:.2f} s)", flush=True)
    return rates, prompt_tokens, firsts


def report(rates: dict, prompt_tokens: dict, firsts: dict) -> None:
    medians = {key: statistics.median(values) for key, values in rates.items()}
    systems = list(dict.fromkeys(system for _, system in medians))
    peers = [peer for peer in ("llama-server", "transformers", "kvgate-before") if peer in systems and "kvgate" in systems]
    print("\n| measurement | prompt tokens | " + " | ".join(f"{s} tok/s" for s in systems)
          + "".join(f" | kvgate/{peer}" for peer in peers) + " |")
    print("| --- " * (2 + len(systems) + len(peers)) + "|")
    workloads = list(dict.fromkeys(workload for workload, _ in medians))
    for workload in workloads:
        prompts = "/".join(str(prompt_tokens[(workload, s)]) for s in systems)
        cells = [f"{medians[(workload, s)]:.1f}" for s in systems]
        ratios = [f"{medians[(workload, 'kvgate')] / medians[(workload, peer)]:.2f}" for peer in peers]
        print(f"| {workload} | {prompts} | " + " | ".join(cells + ratios) + " |")
    for workload in dict.fromkeys(workload for workload, _ in firsts):
        cells = [f"{system} {statistics.median(firsts[(workload, system)]):.2f} s" for system in systems
                 if (workload, system) in firsts]
        print(f"cold time to first token, {workload}: " + ", ".join(cells))
    for system in systems:
        print(f"{system} {workloads[-1]} / {workloads[0]}: "
              f"{medians[(workloads[-1], system)] / medians[(workloads[0], system)]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="kvgate,llama-server,transformers")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--contexts", default="86,1000,3000")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gguf", default="q4_1", help="q4_1 (the embedded GGUF), q4_k_m (made from it) or a path")
    parser.add_argument("--threads", type=int, default=2, help="threads of kvgate and of llama-server alike")
    parser.add_argument("--peer-flags", default="", help='more llama-server flags to try, e.g. "-fa off"')
    parser.add_argument("--before", default="", help="another checkout of kvgate to run beside this one")
    parser.add_argument("--native-layers", action="store_true",
                        help="kvgate (not --before's) with [model] native_layers = true")
    args = parser.parse_args()
    args.gguf = resolve_gguf(args.gguf)
    print(f"# decode benchmark {datetime.datetime.now().isoformat(timespec='seconds')}, "
          f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {args.tokens} tokens per stream, "
          f"{args.threads} threads, {Path(args.gguf).name}")
    report(*measure(args))


if __name__ == "__main__":
    main()

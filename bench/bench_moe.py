"""The MoE runtime's batched decode: one decode step over 8 sessions against 8 batch-1 steps.

A tiny-but-not-trivial random Qwen3-MoE (hidden 512, 4 layers, 64 experts of width 256, top-8,
vocab 4,096; fp32 unless --dtype) is written to a temporary directory and loaded by the qwen3_moe
runtime; 8 sessions of 40-180 tokens are prefilled, then both ways of advancing all 8 by one token
are timed (medians of --repeats steps), and the MoE MLP alone on 8 rows vs 8 x 1 row.
Usage: python bench/bench_moe.py [--threads 2] [--repeats 20] [--dtype fp32] [--device cpu]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import torch

CONFIG = dict(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=2, head_dim=64, num_experts=64, num_experts_per_tok=8,
              moe_intermediate_size=256, norm_topk_prob=True, max_position_embeddings=2048)
LENGTHS = [40, 60, 80, 100, 120, 140, 160, 180]


def build(directory: Path, dtype: str, device: str):
    from tokenizers import Tokenizer, models
    from transformers import AutoConfig, AutoModelForCausalLM

    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime
    from kvgate.models.qwen3.families import QWEN3_MOE

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_moe", **CONFIG), dtype=torch.float32)
    model.save_pretrained(directory)
    Tokenizer(models.WordLevel({f"w{i}": i for i in range(CONFIG["vocab_size"])}, unk_token="w0")).save(
        str(directory / "tokenizer.json"))
    return load_runtime(resolve_source(str(directory)), ModelConfig(dtype=dtype, device=device),
                        EngineConfig(block_size=16, kv_pool_tokens=8192), str(directory), QWEN3_MOE)


def median_seconds(step, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        runtime = build(Path(tmp), args.dtype, args.device)
    sessions = [runtime.new_session() for _ in LENGTHS]
    for session, length in zip(sessions, LENGTHS):
        runtime.prefill(session, [(i * 31) % 4000 + 5 for i in range(length)])
    tokens = [7] * len(sessions)
    for _ in range(3):  # warm-up
        runtime.decode(sessions, tokens)
    batched = median_seconds(lambda: runtime.decode(sessions, tokens), args.repeats, sync)
    one_by_one = median_seconds(lambda: [runtime.decode([s], [t]) for s, t in zip(sessions, tokens)],
                                args.repeats, sync)
    moe_batched, moe_single = moe_only(runtime, args.repeats, sync)
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M} {args.device} {args.dtype} threads={args.threads}")
    print(f"decode step, batch 8:      {batched * 1e3:8.2f} ms")
    print(f"8 decode steps, batch 1:   {one_by_one * 1e3:8.2f} ms  ratio {one_by_one / batched:.2f}x")
    print(f"MoE MLP, 8 rows vs 8 x 1:  {moe_batched * 1e3:8.2f} ms vs {moe_single * 1e3:.2f} ms"
          f"  ratio {moe_single / moe_batched:.2f}x")


def moe_only(runtime, repeats: int, sync) -> tuple[float, float]:
    from kvgate.models.moe.experts import moe_mlp

    layer = runtime.weights.layers[1]
    x = torch.randn(8, CONFIG["hidden_size"], dtype=runtime.dtype, device=runtime.device)
    with torch.inference_mode():
        batched = median_seconds(lambda: moe_mlp(x, runtime.arch.moe, layer.moe), repeats, sync)
        single = median_seconds(lambda: [moe_mlp(x[i:i + 1], runtime.arch.moe, layer.moe) for i in range(8)],
                                repeats, sync)
    return batched, single


if __name__ == "__main__":
    main()

"""DeepSeek V4 MTP speculation through the real engine: acceptance and decode tokens/s, plain vs
``speculative = "mtp"`` with draft lengths 1 and 3, on the tiny random V4 of
tests/models/tiny_deepseek_v4.py (fp32, CPU) with two MTP layers:

- ``random``: the random ``mtp.0.*`` layer the tests use (an acceptance floor);
- ``distilled``: the same layer trained (``--steps`` Adam steps) to predict the main model's own
  greedy next token from the main model's streams at the previous position, over the main model's
  greedy continuations of random prompts -- what a real MTP layer is trained toward, so it bounds
  what the runtime's draft path gives when drafts are good. Training uses the transformers modules
  the tests check the draft against; the runtime then loads the layer from the checkpoint.

Greedy requests without stop tokens (``--tokens`` each), ``--batch`` at a time; tokens/s counts the
tokens after each request's first over the time from the first token to the last (prefill left
out); each figure is the median of ``--repeats`` runs. Speculative outputs are checked equal to plain decoding.
Usage: python bench/bench_deepseek_v4.py [--threads 1] [--tokens 64] [--batch 1] [--repeats 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kvgate.core.config import EngineConfig  # noqa: E402
from kvgate.core.engine.engine import Engine  # noqa: E402
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut  # noqa: E402
from kvgate.core.types import SamplingParams  # noqa: E402
from tests.models.tiny_deepseek_v4 import (build_tiny_v4, load_tiny_v4, random_mtp_layer,  # noqa: E402
                                           write_mtp_layer)
from mtp_distill import distill  # noqa: E402

PROMPTS = [[(i * m + 11) % 97 for i in range(n)] for m, n in ((37, 9), (53, 23), (29, 16), (71, 31))]


def run(runtime, config: EngineConfig, prompts, tokens: int):
    """(outputs, decode seconds: from the first token delivered to the last, the decode step) of
    ``prompts`` submitted at once."""
    engine = Engine(runtime, config)
    engine.start()
    try:
        inboxes = [queue.Queue() for _ in prompts]
        for prompt, inbox in zip(prompts, inboxes):
            engine.submit(Sequence(prompt=prompt, params=SamplingParams(temperature=0.0), max_tokens=tokens,
                                   stop_token_ids=frozenset(), deliver=inbox.put))
        drained = [drain(inbox) for inbox in inboxes]
        seconds = max(d[2] for d in drained) - min(d[1] for d in drained)
        return [d[0] for d in drained], seconds, engine.decode_step
    finally:
        engine.stop()


def drain(inbox: queue.Queue) -> tuple[list[int], float, float]:
    """(tokens, when the first arrived, when the sequence finished)."""
    out, first = [], 0.0
    while True:
        item = inbox.get(timeout=300)
        if isinstance(item, TokenOut):
            out.append(item.token)
            first = first or time.perf_counter()
        elif isinstance(item, SequenceDone):
            assert item.reason == "length", item
            return out, first, time.perf_counter()


def measure(runtime, config: EngineConfig, batch: int, args, expected=None) -> dict:
    run(runtime, config, PROMPTS[:batch], 8)  # warm-up
    rows = []
    for _ in range(args.repeats):
        outputs, seconds, drafted, accepted = [], 0.0, 0, 0
        for at in range(0, len(PROMPTS), batch):
            out, took, step = run(runtime, config, PROMPTS[at:at + batch], args.tokens)
            outputs += out
            seconds += took
            stats = getattr(step, "stats", None)
            drafted, accepted = drafted + (stats.drafted if stats else 0), accepted + (stats.accepted if stats else 0)
        assert expected is None or outputs == expected, "speculation changed the greedy output"
        rows.append(((sum(map(len, outputs)) - len(outputs)) / seconds, drafted, accepted, outputs))
    rate = statistics.median(r[0] for r in rows)
    return {"tokens_per_s": rate, "drafted": rows[0][1], "accepted": rows[0][2], "outputs": rows[0][3]}


def report(name: str, result: dict, plain: dict) -> None:
    drafted, accepted = result["drafted"], result["accepted"]
    acceptance = f"{accepted / drafted:6.1%}" if drafted else "     -"
    print(f"  {name:<22} {result['tokens_per_s']:8.1f} tok/s  x{result['tokens_per_s'] / plain['tokens_per_s']:4.2f}  "
          f"drafted {drafted:5d}  accepted {accepted:5d}  acceptance {acceptance}")


def with_mtp_layer(directory: Path, target: Path, model, kind: str, args):
    """The runtime of a copy of ``directory`` with a random or distilled MTP layer, drafting."""
    target.mkdir()
    for file in directory.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    source, parts = random_mtp_layer()
    if kind == "distilled":
        loss, agreement = distill(model, load_tiny_v4(directory), source, parts, args.steps)
        print(f"distilled MTP layer: {args.steps} steps, training loss {loss:.3f}; its first draft token agrees "
              f"with the main model's greedy token at {agreement:.1%} of held-out positions")
    write_mtp_layer(target, source, parts)
    return load_tiny_v4(target, speculative="mtp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {len(PROMPTS)} greedy requests of {args.tokens} "
          f"tokens, batches of {args.batch}, median of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "main"
        model = build_tiny_v4(directory)
        runtimes = {"plain": load_tiny_v4(directory)}
        runtimes.update({kind: with_mtp_layer(directory, Path(tmp) / kind, model, kind, args)
                         for kind in ("random", "distilled")})
        for batch in args.batch:
            plain = measure(runtimes["plain"], EngineConfig(max_batch=batch), batch, args)
            print(f"batch {batch}: plain {plain['tokens_per_s']:.1f} tok/s")
            for kind in ("random", "distilled"):
                for draft in (1, 3):
                    config = EngineConfig(max_batch=batch, speculative="mtp", speculative_mtp=draft)
                    report(f"{kind} mtp={draft}", measure(runtimes[kind], config, batch, args, plain["outputs"]), plain)


if __name__ == "__main__":
    main()

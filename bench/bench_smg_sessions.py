"""Agent sessions behind the real SMG router: two kvgate workers, cache_aware vs round_robin, with and
without a shared SSD tier, and with one worker SIGKILLed mid-run.

Workload (``agent_workload.py``): ``--sessions`` (8) sessions on one shared system prompt of
``--shared`` (1,000) tokens; turn 1 adds ``--per-session`` (500) own tokens, every later turn appends
the previous answer and ``--per-turn`` (100) new tokens; ``--turns`` (6) turns, ``--output`` (16)
output tokens, temperature 0. Each turn visits the sessions in an order shuffled with ``--seed``
(the same order for every setup): in a fixed order with an even number of sessions round_robin
would keep each session on one worker by accident.

Setups (``--setups``, all by default), each on fresh workers with SMG's defaults but for its health
checks (1 s, one failure), every setup getting the same requests, interleaved request by request so
machine load hits all alike:
  single           one worker behind SMG (the baseline)
  ca               2 workers, cache_aware, each worker its own SSD tier
  ca+ssd           2 workers, cache_aware, one shared ssd_path
  rr               2 workers, round_robin, each worker its own SSD tier
  rr+ssd           2 workers, round_robin, one shared ssd_path
  ca+ssd+kill      as ca+ssd; before turn ``--kill-turn`` (5), once its SSD writer is idle, the worker
                   that served most of the previous turn is SIGKILLed and SMG marks it unhealthy
The workers keep kvgate's defaults (the device tier holds the whole workload): what differs
between setups is only where SMG sends each request. With SMG's default ``--cache-threshold`` (0.3)
the shared system prompt alone is enough of a match to send every session to the worker that served
the first one, so cache_aware keeps the whole workload on one worker; ``--smg-args`` passes other
router flags to every setup (e.g. ``--smg-args="--cache-threshold 0.9"``). All setups run at once:
11 workers of about 0.8 GB each with SmolLM2-135M.

Per setup: hit ratio = cached / prompt tokens over all requests (cached exact, from the serving
worker's /metrics, split device / SSD); the ceiling (the prefix shared with any earlier request of
the setup, plus that request's output when its whole prompt is a prefix: prompts tokenized with
/v1/tokenize on the same messages); cached / ceiling; sessions moved between workers; median TTFT
(streamed, first content token). For the kill setup, each session that moved to the survivor: the
share of its previous prompt served from SSD (and from SSD + device) on its first request after.
Prints a markdown table; writes ``<out>/smg_sessions.json``.

Usage: python bench/bench_smg_sessions.py [--setups single,ca,ca+ssd,rr,rr+ssd,ca+ssd+kill]
       [--sessions 8 --turns 6 --shared 1000 --per-session 500 --per-turn 100 --output 16]
       [--kill-turn 5] [--seed 0] [--smg-args="..."] [--out bench/out/smg_sessions]
Smaller, for a smoke run: --sessions 4 --turns 3 --shared 300 --per-session 200 --per-turn 50 --kill-turn 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from agent_workload import Workload, ceiling, prompt_tokens  # noqa: E402
from smg_cluster import Cluster, Setup  # noqa: E402
from smg_sessions_report import markdown, summarize  # noqa: E402


def setups(kill_turn: int) -> dict[str, Setup]:
    return {s.name: s for s in (
        Setup("single", 1, "cache_aware", False), Setup("ca", 2, "cache_aware", False),
        Setup("ca+ssd", 2, "cache_aware", True), Setup("rr", 2, "round_robin", False),
        Setup("rr+ssd", 2, "round_robin", True), Setup("ca+ssd+kill", 2, "cache_aware", True, kill_turn))}


class SetupRun:
    """One setup's cluster, conversations, request history (for the ceiling) and rows."""

    def __init__(self, cluster: Cluster, system: str, sessions: int):
        self.cluster, self.rows, self.history = cluster, [], []
        self.chats = [[{"role": "system", "content": system}] for _ in range(sessions)]
        self.last = [{} for _ in range(sessions)]  # each session's previous row
        self.killed: str | None = None

    def ask(self, turn: int, session: int, user: str, output: int) -> dict:
        messages = self.chats[session] + [{"role": "user", "content": user}]
        result = self.cluster.ask(messages, output)
        tokens = prompt_tokens(self.cluster.live()[0].base_url, messages)
        usage, previous = result["usage"] or {}, self.last[session]
        row = {"setup": self.cluster.setup.name, "turn": turn, "session": session, "worker": result["worker"],
               "moved": bool(previous) and previous["worker"] != result["worker"],
               "after_kill": bool(previous) and previous["worker"] == self.killed,
               "ttft_s": round(result["ttft"], 4), "total_s": round(result["total"], 4), "attempts": result["attempts"],
               "prompt_tokens": len(tokens), "usage_prompt_tokens": usage.get("prompt_tokens"),
               "usage_cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
               "completion_tokens": usage.get("completion_tokens"), "ceiling_tokens": ceiling(tokens, self.history),
               "cached_device": result["sources"]["device"], "cached_ssd": result["sources"]["ssd"],
               "computed": result["sources"]["computed"],
               "previous_prompt_tokens": previous.get("prompt_tokens")}
        self.history.append((tokens, usage.get("completion_tokens") or 0))
        self.chats[session] = messages + [{"role": "assistant", "content": result["answer"]}]
        self.last[session] = row
        self.rows.append(row)
        return row

    def kill_busiest(self, turn: int) -> None:
        served = [r["worker"] for r in self.rows if r["turn"] == turn - 1]
        holder = max(sorted(set(served)), key=served.count)
        self.killed = holder
        self.cluster.kill(self.cluster.worker_at(holder))
        print(f"{self.cluster.setup.name}: killed {holder} before turn {turn}", flush=True)


def run(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = [setups(args.kill_turn)[name] for name in args.setups.split(",")]
    clusters: list[Cluster] = []
    try:
        for setup in chosen:
            clusters.append(Cluster(setup, out, shlex.split(args.smg_args)))
            clusters[-1].start()
        counter = clusters[0].workers[0].base_url
        workload = Workload(counter, args.shared, args.per_session, args.per_turn, args.sessions)
        runs = [SetupRun(cluster, workload.system, args.sessions) for cluster in clusters]
        order = random.Random(args.seed)
        for turn in range(1, args.turns + 1):
            for each in (r for r in runs if r.cluster.setup.kill_turn == turn):
                each.kill_busiest(turn)
            sessions = list(range(args.sessions))
            order.shuffle(sessions)
            for session in sessions:
                user = workload.user_message(session, turn)
                for each in runs:
                    print(json.dumps(each.ask(turn, session, user, args.output)), flush=True)
    finally:
        for cluster in clusters:
            cluster.stop()
    rows = [row for each in runs for row in each.rows]
    return {"args": vars(args), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setups", default="single,ca,ca+ssd,rr,rr+ssd,ca+ssd+kill")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--shared", type=int, default=1000)
    parser.add_argument("--per-session", type=int, default=500)
    parser.add_argument("--per-turn", type=int, default=100)
    parser.add_argument("--output", type=int, default=16)
    parser.add_argument("--kill-turn", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smg-args", default="", help="more smg launch flags for every setup")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "smg_sessions"))
    args = parser.parse_args()
    if not 2 <= args.kill_turn <= args.turns:
        parser.error("--kill-turn must lie in 2..--turns")
    report = run(args)
    report["summary"] = summarize(report["rows"])
    lines = markdown(report["summary"])
    report["table"] = lines
    path = Path(args.out) / "smg_sessions.json"
    path.write_text(json.dumps(report, indent=2))
    print("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

"""Agent-shaped multi-turn prefix-cache benchmark: kvgate (cold, device, SSD, restart) vs llama.cpp.

Workload (field-notes "E", Codex-shaped): two sessions interleaved on one shared system prompt;
turn 1 sends ``--shared`` (2,000) shared + ``--per-session`` (1,000) own tokens, every later turn
appends the previous answer and ``--per-turn`` (200) new tokens; ``--turns`` (10) turns,
``--output`` (32) output tokens, temperature 0. Every system gets the same requests in one run,
interleaved request by request, so machine load hits all of them alike.

Systems (all real servers on 127.0.0.1):
  kvgate-cold     prefix cache disabled: every turn is a full prefill
  kvgate-device   device tier + SSD tier; the server is restarted before turn ``--restart-turn``
                  (that turn is served from SSD, the others from device)
  kvgate-ssd      the device tier plugin disabled: every hit is an SSD restore
  kvgate-cold-fast, kvgate-device-fast
                  kvgate-cold and kvgate-device with ``engine.deterministic = false``
  llamacpp        llama-cpp-python's server with its RAM prompt cache (when installed; see peers.md)
  llama-server    llama.cpp's own server, ``-c 16384 -np 2 --slot-prompt-similarity 0.8 --cache-reuse 256
                  --cache-ram 8192`` (each session keeps its own slot: its best setting for this
                  workload); bench/llama_server.py builds it on first use (~11 minutes on 2 cores)

Reports TTFT per turn and system, kvgate's hit ratio by tier against the theoretical ceiling (tokens
an ideal cache could serve: the prefix shared with an earlier request plus its output), writes
``<out>/agent_cache.json`` and a plot ``<out>/agent_cache.png``.
Usage: python bench/bench_agent_cache.py [--systems kvgate-cold,kvgate-device,kvgate-ssd,llamacpp,llama-server]
       [--family embedded|qwen3|qwen3_5] (a tiny dense or hybrid checkpoint instead of SmolLM2; kvgate systems only)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from agent_models import FAMILIES, model_settings  # noqa: E402
from agent_workload import Workload, ceiling, prompt_tokens, stream_chat  # noqa: E402
from bench_runtime import cpu_busy  # noqa: E402
from llama_server import LlamaServer, llama_server_available  # noqa: E402
from tests.harness import ServerProcess, free_port  # noqa: E402

KVGATE = {
    "kvgate-cold": {"cache": {"enabled": False}},
    "kvgate-device": {},
    "kvgate-ssd": {"plugins": {"disabled": ["device_cache"]}},
    # the same two without the deterministic default (engine.deterministic = false)
    "kvgate-cold-fast": {"cache": {"enabled": False}, "engine": {"deterministic": False}},
    "kvgate-device-fast": {"engine": {"deterministic": False}},
}
RESTARTED = ("kvgate-device", "kvgate-device-fast")  # restarted before --restart-turn
COLD_OF = {"kvgate-device": "kvgate-cold", "kvgate-ssd": "kvgate-cold", "kvgate-device-fast": "kvgate-cold-fast"}
PEER_PYTHON = ROOT / "bench" / ".peer" / "venv" / "bin" / "python"
# -c is split between the slots: 8,192 tokens each, room for the workload's last turn
LLAMA_SERVER_ARGS = ["-c", "16384", "-np", "2", "--slot-prompt-similarity", "0.8", "--cache-reuse", "256",
                     "--cache-ram", "8192"]
PEERS = ("llamacpp", "llama-server")


def kvgate_server(name: str, out: Path, family: str, port: Optional[int] = None) -> ServerProcess:
    """A kvgate system's server of ``family``'s model; a restart passes the old port, so URLs held
    elsewhere stay valid."""
    settings = {section: dict(values) for section, values in KVGATE[name].items()}
    settings.setdefault("cache", {})["ssd_path"] = str(out / f"ssd-{name}")
    settings["model"] = {"threads": 2, **({} if family == "embedded" else model_settings(family))}
    return ServerProcess(out / name, settings, port=port, state_dir=out / "state", timeout=600)


class PeerServer:
    """llama-cpp-python's OpenAI server with its RAM prompt cache, on the embedded GGUF."""

    def __init__(self, python: Path, out: Path):
        from kvgate.models.embedded import embedded_gguf_path

        self.port, self.log = free_port(), open(out / "llamacpp.log", "ab")
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(python), "-m", "llama_cpp.server", "--model", embedded_gguf_path(), "--model_alias", "smollm2",
             "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "8192", "--chat_format", "chatml",
             "--n_threads", "2", "--cache", "True", "--cache_type", "ram"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 300
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(self.base_url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(f"llama.cpp server did not start; see {out / 'llamacpp.log'}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start_systems(names: list[str], out: Path, family: str) -> dict:
    servers = {}
    for name in names:
        if name in PEERS and family != "embedded":
            print(f"{name} skipped: the peers serve the embedded GGUF, not tiny-{family}")
        elif name == "llamacpp":
            if not PEER_PYTHON.exists():
                print(f"llamacpp skipped: no {PEER_PYTHON} (build it as in reference/peers.md)")
                continue
            servers[name] = PeerServer(PEER_PYTHON, out)
        elif name == "llama-server":
            if llama_server_available():
                servers[name] = LlamaServer(LLAMA_SERVER_ARGS, log_path=out / "llama-server.log").start()
        else:
            shutil.rmtree(out / f"ssd-{name}", ignore_errors=True)
            servers[name] = kvgate_server(name, out, family).start()
    return servers


def run(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    servers = start_systems(args.systems.split(","), out, args.family)
    model = "smollm2" if args.family == "embedded" else f"tiny-{args.family}"
    counter = next(s for n, s in servers.items() if n.startswith("kvgate"))
    workload = Workload(counter.base_url, args.shared, args.per_session, args.per_turn)
    chats = {name: [[{"role": "system", "content": workload.system}] for _ in range(2)] for name in servers}
    history = {name: [] for name in servers}
    rows = []
    try:
        for turn in range(1, args.turns + 1):
            for name in (n for n in RESTARTED if n in servers and turn == args.restart_turn):
                servers[name].stop()
                servers[name] = kvgate_server(name, out, args.family, servers[name].port).start()
            for session in range(2):
                user = workload.user_message(session, turn)
                for name, server in servers.items():
                    messages = chats[name][session] + [{"role": "user", "content": user}]
                    busy = cpu_busy(0.2)
                    result = stream_chat(server.base_url, messages, args.output, model)
                    tokens = prompt_tokens(counter.base_url, messages)
                    usage = result["usage"] or {}
                    split = usage.get("kvgate") or {}
                    rows.append({
                        "system": name, "session": session, "turn": turn, "ttft_s": round(result["ttft"], 4),
                        "total_s": round(result["total"], 4), "prompt_tokens": len(tokens),
                        "completion_tokens": usage.get("completion_tokens"),
                        "cached_device": split.get("cached_tokens_device"), "cached_ssd": split.get("cached_tokens_ssd"),
                        "replayed": split.get("replayed_tokens"),
                        "cached_reported": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                        "ceiling_tokens": ceiling(tokens, history[name]), "cpu_busy_before": round(busy, 1),
                        "restarted": name in RESTARTED and turn == args.restart_turn})
                    history[name].append((tokens, usage.get("completion_tokens") or 0))
                    chats[name][session] = messages + [{"role": "assistant", "content": result["answer"]}]
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return {"args": vars(args), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}


def summarize(report: dict) -> list[str]:
    rows, lines = report["rows"], []
    systems = sorted({r["system"] for r in rows})
    turns = sorted({r["turn"] for r in rows})
    lines.append("TTFT seconds (mean of both sessions) per turn")
    lines.append("turn  " + "  ".join(f"{s:>14}" for s in systems))
    for turn in turns:
        cells = [statistics.mean(r["ttft_s"] for r in rows if r["system"] == s and r["turn"] == turn) for s in systems]
        lines.append(f"{turn:>4}  " + "  ".join(f"{c:>14.3f}" for c in cells))
    for system in systems:
        own = [r for r in rows if r["system"] == system]
        prompt = sum(r["prompt_tokens"] for r in own)
        ideal = sum(r["ceiling_tokens"] for r in own)
        if own[0]["cached_device"] is None:
            lines.append(peer_hit_line(system, own, ideal / prompt))
            continue
        device = sum(r["cached_device"] or 0 for r in own)
        ssd = sum(r["cached_ssd"] or 0 for r in own)
        lines.append(f"{system}: hit ratio {(device + ssd) / prompt:.1%} (device {device / prompt:.1%}, "
                     f"SSD {ssd / prompt:.1%}) vs ceiling {ideal / prompt:.1%}")
        lines.append(replay_line(system, own))
    lines.extend(ratio_lines(rows, systems))
    return lines


def replay_line(system: str, own: list[dict]) -> str:
    """Tokens the runtime ran again to cut a hit's state (a hybrid's replay from its nearest snapshot)."""
    hits = [r["replayed"] or 0 for r in own if (r["cached_device"] or 0) + (r["cached_ssd"] or 0) > 0]
    if not hits:
        return f"{system}: no hits"
    return (f"{system}: replayed tokens per hit: mean {statistics.mean(hits):.1f}, max {max(hits)}, "
            f"{sum(1 for h in hits if h)} of {len(hits)} hits replayed any")


def peer_hit_line(system: str, own: list[dict], ceiling_share: float) -> str:
    """A peer's own cached-token count (usage.prompt_tokens_details, in its tokens) against the ceiling."""
    if any(r.get("cached_reported") is None for r in own):
        return f"{system}: ceiling {ceiling_share:.1%} (server reports no cached tokens)"
    cached = sum(r["cached_reported"] for r in own) / sum(r["prompt_tokens"] for r in own)
    return f"{system}: reported cached {cached:.1%} of prompt tokens vs ceiling {ceiling_share:.1%}"


def ratio_lines(rows: list[dict], systems: list[str]) -> list[str]:
    """The issue's targets: hit TTFT over cold TTFT, the restart's SSD share, median TTFT vs the peer."""
    lines = []
    colds = {system: {(r["turn"], r["session"]): r["ttft_s"] for r in rows if r["system"] == system}
             for system in set(COLD_OF.values())}
    for system, cold_system in COLD_OF.items():
        cold = colds[cold_system]
        ratios = [r["ttft_s"] / cold[(r["turn"], r["session"])] for r in rows
                  if r["system"] == system and r["turn"] > 1 and not r["restarted"] and (r["turn"], r["session"]) in cold]
        if ratios:
            lines.append(f"{system} TTFT / {cold_system} TTFT on turns 2+ (same request): median "
                         f"{statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    for r in (r for r in rows if r["restarted"]):
        cold = colds[COLD_OF[r["system"]]]
        lines.append(f"after the restart, {r['system']} session {r['session']}: {r['cached_ssd']} of the previous prefix's "
                     f"{r['ceiling_tokens']} tokens from SSD ({(r['cached_ssd'] or 0) / r['ceiling_tokens']:.2%}), "
                     f"TTFT {r['ttft_s']:.3f} s vs cold {cold.get((r['turn'], r['session']), float('nan')):.3f} s")
    later = {s: [r["ttft_s"] for r in rows if r["system"] == s and r["turn"] >= 2] for s in systems}
    medians = {s: statistics.median(ttfts) for s, ttfts in later.items() if ttfts}
    for peer in (p for p in PEERS if p in medians):
        for system in (s for s in medians if s.startswith("kvgate")):
            lines.append(f"median TTFT turns 2+ {system} {medians[system]:.3f} s vs {peer} {medians[peer]:.3f} s: "
                         f"ratio {medians[system] / medians[peer]:.2f}")
    return lines


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, axis = plt.subplots(figsize=(9, 5))
    for system in sorted({r["system"] for r in rows}):
        turns = sorted({r["turn"] for r in rows if r["system"] == system})
        means = [statistics.mean(r["ttft_s"] for r in rows if r["system"] == system and r["turn"] == t) for t in turns]
        axis.plot(turns, means, marker="o", label=system)
    restart = report["args"]["restart_turn"]
    axis.axvline(restart, color="grey", linestyle=":", label=f"kvgate-device restarted before turn {restart}")
    axis.set_xticks(sorted({r["turn"] for r in rows}))
    axis.set_yscale("log")
    axis.set_xlabel("turn (two sessions interleaved; mean of both)")
    axis.set_ylabel("time to first token (s, log scale)")
    family = report["args"].get("family", "embedded")
    axis.set_title(f"{'SmolLM2-135M' if family == 'embedded' else 'tiny ' + family}, 2 CPU cores: TTFT per turn")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="kvgate-cold,kvgate-device,kvgate-ssd,llamacpp,llama-server")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--shared", type=int, default=2000)
    parser.add_argument("--per-session", type=int, default=1000)
    parser.add_argument("--per-turn", type=int, default=200)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--restart-turn", type=int, default=6)
    parser.add_argument("--family", choices=("embedded", *FAMILIES), default="embedded",
                        help="the model the kvgate systems serve: the embedded SmolLM2 or a tiny random checkpoint "
                             "(qwen3_5: a hybrid; qwen3: a dense model of the same size); peers need the embedded one")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args()
    report = run(args)
    lines = summarize(report)
    report["summary"] = lines
    out = Path(args.out)
    (out / "agent_cache.json").write_text(json.dumps(report, indent=2))
    plot(report, out / "agent_cache.png")
    print("\n".join(lines))
    print(f"wrote {out / 'agent_cache.json'} and {out / 'agent_cache.png'}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()

"""Cache continuity on real agent traffic: Claude Code (full mode) and Codex, each through a
multi-turn session against a fresh kvgate on the defaults, every request recorded and analysed.

Each turn is one CLI run continuing the previous one (``claude -p --continue``, ``codex exec
resume --last``). One turn (``--tool-turn``) carries the request hint ``x-kvgate-tool-choice``
(Claude Code: ``ANTHROPIC_CUSTOM_HEADERS``; Codex: the provider's ``http_headers``), which makes
the fence call a tool (Read; Codex: collaboration__list_agents, which its default tool set
holds) where SmolLM2 would just answer: the agent runs the
tool and sends its result back in the same turn, unforced. The server records every generation
(``[server] record_path``, token ids) and keeps almost-hits from 64 shared tokens on; the analysis
(:mod:`session_analysis`) reports per request the cached tokens against the ceiling and explains
each miss. Output is capped by ``engine.default_max_tokens`` (Codex sends no cap) and
``CLAUDE_CODE_MAX_OUTPUT_TOKENS``.

Usage: python bench/agent_sessions.py [--agents claude,codex] [--turns 5] [--tool-turn 2]
       [--codex-transport http|websocket] [--out .cache/agent_sessions]
Needs the clients under .cache/ (tests/clients/ installs them). Slow on CPU: minutes per agent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from session_analysis import analyse, detokenizer, read_records, summary, table  # noqa: E402
from tests.harness import ServerProcess  # noqa: E402

PROMPTS = ["What is in this folder?", "Read the file notes.txt.", "What does the file say?",
           "Summarise our conversation in one sentence.", "Thank you, that is all."]
TOOLS = {"claude": "Read", "codex": "collaboration__list_agents"}  # harmless, local, no side effects
HINT = "x-kvgate-tool-choice"


def claude_turn(server: ServerProcess, work: Path, turn: int, prompt: str, forced: bool, cap: int) -> dict:
    binary = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
    env = {"PATH": f"{binary.parent}:{os.environ['PATH']}", "HOME": str(work / "home"), "TERM": "dumb",
           "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_DISABLE_1M_CONTEXT": "1",
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(cap)}
    if forced:
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"{HINT}: {TOOLS['claude']}"
    args = [str(binary), "-p", prompt, "--output-format", "json", "--allowedTools", "Read"]
    done = subprocess.run(args + (["--continue"] if turn > 1 else []), cwd=work / "cwd", env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    return {"rc": done.returncode, "result": str(result.get("result", done.stderr[-300:]))[:120],
            "turns": result.get("num_turns")}


def codex_config(server: ServerProcess, websockets: bool, forced: bool) -> str:
    headers = f'http_headers = {{ "{HINT}" = "{TOOLS["codex"]}" }}' if forced else ""
    return f"""model_provider = "local"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
[model_providers.local]
name = "kvgate"
base_url = "{server.base_url}/v1"
wire_api = "responses"
env_key = "LOCAL_API_KEY"
supports_websockets = {"true" if websockets else "false"}
{headers}
[analytics]
enabled = false
[features]
plugins = false
apps = false
"""


def codex_turn(server: ServerProcess, work: Path, turn: int, prompt: str, forced: bool, websockets: bool) -> dict:
    binary = ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex"
    (work / "codex-home").mkdir(exist_ok=True)
    (work / "codex-home" / "config.toml").write_text(codex_config(server, websockets, forced))
    env = {"PATH": f"{binary.parent}:{os.environ['PATH']}", "HOME": str(work / "home"),
           "CODEX_HOME": str(work / "codex-home"), "LOCAL_API_KEY": "dummy", "TERM": "dumb"}
    args = [str(binary), "exec"] + (["resume", "--last"] if turn > 1 else []) + ["--skip-git-repo-check", "--json"]
    done = subprocess.run(args + [prompt], cwd=work / "cwd", env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=1800)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    return {"rc": done.returncode, "items": [i.get("type") for i in items], "stderr": done.stderr[-200:],
            "result": next((i.get("text", "") for i in reversed(items) if i.get("type") == "agent_message"), "")[:120]}


def run_agent(agent: str, args, out: Path) -> dict:
    work = out / agent
    shutil.rmtree(work, ignore_errors=True)  # a fresh server state: the session starts cold
    work.mkdir(parents=True)
    # the agents run outside any git repository: Claude Code puts `git status` in its system prompt
    (work / "agent").symlink_to(tempfile.mkdtemp(prefix=f"kvgate-{agent}-"))
    for folder in ("home", "cwd"):
        (work / "agent" / folder).mkdir()
    (work / "agent" / "cwd" / "notes.txt").write_text("The meeting moved to Thursday at ten.\n")
    record = work / "requests.jsonl"
    settings = {"server": {"record_path": str(record)}, "engine": {"default_max_tokens": args.max_tokens},
                "cache": {"almost_hit_min_tokens": 64, "almost_hit_min_ratio": 0.0}}
    turns = []
    with ServerProcess(work / "server", settings) as server:
        for turn in range(1, args.turns + 1):
            before, started = len(read_records(record)), time.time()
            forced, prompt = turn == args.tool_turn, PROMPTS[(turn - 1) % len(PROMPTS)]
            if agent == "claude":
                outcome = claude_turn(server, work / "agent", turn, prompt, forced, args.max_tokens)
            else:
                outcome = codex_turn(server, work / "agent", turn, prompt, forced,
                                     args.codex_transport == "websocket")
            outcome.update(turn=turn, forced=forced, wall_s=round(time.time() - started, 1),
                           requests=len(read_records(record)) - before)
            print(agent, json.dumps(outcome), flush=True)
            turns.append(outcome)
        records = read_records(record)
        bounds = [0]
        for t in turns:
            bounds.append(bounds[-1] + t["requests"])
        for t, (lo, hi) in enumerate(zip(bounds, bounds[1:]), start=1):
            for r in records[lo:hi]:
                r["turn"] = t
        almost = httpx.get(server.base_url + "/v1/cache/diagnostics", timeout=30).json().get("almost_hits", [])
        rows = analyse(records, almost, detokenizer(server.base_url))
    report = {"agent": agent, "turns": turns, "rows": rows, "summary": summary(rows)}
    (work / "report.json").write_text(json.dumps(report, indent=1))
    (work / "report.md").write_text(table(rows) + "\n")
    print(table(rows), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="codex,claude")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tool-turn", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--codex-transport", choices=("http", "websocket"), default="http")
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "agent_sessions")
    args = parser.parse_args()
    for agent in args.agents.split(","):
        run_agent(agent.strip(), args, args.out)


if __name__ == "__main__":
    main()

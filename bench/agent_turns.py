"""Wall time of one agent turn on the defaults: a real ``claude -p "Say hello"`` and a real
``codex exec "Say hello"`` against a fresh ``kvgate serve`` (the embedded model, no settings), each
set up as the README's "Use with Claude Code / Codex" recipe sets it up (``kvgate agent-env ...
--write`` in a throwaway HOME). Each turn starts cold: the server is fresh, and the two agents'
prompts share no prefix. Prints, per agent: exit code, wall seconds, output tokens and the answer.

Usage: python bench/agent_turns.py [--agents claude,codex] [--prompt "Say hello"]
Needs the clients under .cache/ (tests/clients/ installs them). Minutes per turn on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvgate.plugins.agent_env import UNUSED_KEY, claude_env, write_claude_files, write_codex_files  # noqa: E402
from tests.harness import ServerProcess  # noqa: E402

BINARIES = {"claude": ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude",
            "codex": ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex"}
TURN_TIMEOUT_S = 3600


def claude_turn(server: ServerProcess, home: Path, prompt: str) -> tuple[list[str], dict]:
    write_claude_files(home, UNUSED_KEY)
    env = {**claude_env(server.base_url, UNUSED_KEY), "HOME": str(home)}
    return [str(BINARIES["claude"]), "-p", prompt, "--output-format", "json"], env


def codex_turn(server: ServerProcess, home: Path, prompt: str) -> tuple[list[str], dict]:
    write_codex_files(home, server.base_url, needs_key=False)
    return [str(BINARIES["codex"]), "exec", "--skip-git-repo-check", "--json", prompt], {"HOME": str(home)}


def answer_of(agent: str, stdout: str) -> tuple[str, object]:
    """The agent's answer and its output tokens, read from its JSON output."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if agent == "claude":
        result = events[-1] if events else {}
        return str(result.get("result", "")), result.get("usage", {}).get("output_tokens")
    texts = [e["item"].get("text", "") for e in events if e.get("type") == "item.completed"]
    usage = next((e["usage"] for e in events if e.get("type") == "turn.completed"), {})
    return " | ".join(texts), usage.get("output_tokens")


def run_turn(agent: str, server: ServerProcess, work: Path, prompt: str) -> dict:
    home, cwd = work / agent / "home", work / agent / "cwd"
    home.mkdir(parents=True)
    cwd.mkdir(parents=True)
    args, env = (claude_turn if agent == "claude" else codex_turn)(server, home, prompt)
    env = {**env, "PATH": f"{BINARIES[agent].parent}:{os.environ['PATH']}", "TERM": "dumb"}
    started = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TURN_TIMEOUT_S)
    wall = time.monotonic() - started
    answer, tokens = answer_of(agent, done.stdout)
    return {"agent": agent, "rc": done.returncode, "wall_s": round(wall, 1), "output_tokens": tokens,
            "answer": answer[:160] or done.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="claude,codex")
    parser.add_argument("--prompt", default="Say hello")
    args = parser.parse_args()
    agents = args.agents.split(",")
    missing = [agent for agent in agents if not BINARIES[agent].exists()]
    if missing:
        sys.exit(f"not installed: {missing} (run tests/clients/ once to install them under .cache/)")
    with tempfile.TemporaryDirectory(prefix="agent-turns-") as folder:
        work = Path(folder)
        with ServerProcess(work / "server", timeout=600) as server:  # the defaults: no settings
            for agent in agents:
                print(json.dumps(run_turn(agent, server, work, args.prompt)), flush=True)


if __name__ == "__main__":
    main()

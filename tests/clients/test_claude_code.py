"""Claude Code (the real npm client) against kvgate on 127.0.0.1 with the embedded SmolLM2.

The client is installed once into the repository's ignored ``.cache/claude-code`` folder and
reused by later runs. It runs offline, with a throwaway HOME and stdin closed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow

CLAUDE_CODE_VERSION = "2.1.197"
CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "claude-code"
SMOLLM2_CONTEXT = 8192  # SmolLM2-135M's trained context, the server's default limit
MAX_OUTPUT_TOKENS = 128
# Claude Code sends no temperature, so SmolLM2 samples at 1.0 and sometimes rambles past the output
# limit on every continuation; only that outcome is retried.
RAMBLED = f"exceeded the {MAX_OUTPUT_TOKENS} output token maximum"


def installed_version(binary: Path) -> str:
    if not binary.exists():
        return ""
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    return result.stdout.split(" ")[0].strip()


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    binary = CACHE_DIR / "node_modules" / ".bin" / "claude"
    if installed_version(binary) != CLAUDE_CODE_VERSION:
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed: cannot install Claude Code")
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(CACHE_DIR), f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"],
                       check=True, capture_output=True, timeout=600)
    assert installed_version(binary) == CLAUDE_CODE_VERSION
    return binary


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    settings = {"model": {"aliases": ["claude-*"], "max_context": SMOLLM2_CONTEXT}, "server": {"log_requests": True}}
    with ServerProcess(tmp_path_factory.mktemp("claude_code"), settings=settings) as proc:
        yield proc


def run_claude(claude_bin: Path, server, tmp_path: Path, *args: str) -> tuple[int, dict]:
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir(parents=True)
    workdir.mkdir()
    env = {"PATH": f"{claude_bin.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home), "TERM": "dumb",
           "ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT_TOKENS)}
    result = subprocess.run([str(claude_bin), "-p", "Say hello", *args, "--model", "smollm2", "--output-format", "json"],
                            cwd=workdir, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout.strip().splitlines()[-1])


def test_bare_run_completes(claude_bin, server, tmp_path):
    for attempt in range(3):
        code, output = run_claude(claude_bin, server, tmp_path / str(attempt), "--bare")
        if RAMBLED not in str(output.get("result")):
            break
    assert code == 0, (output, server.log()[-3000:])
    assert output["type"] == "result" and output["subtype"] == "success" and output["is_error"] is False
    assert isinstance(output["result"], str) and output["result"].strip()
    usage = output["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] > 1000 and usage["output_tokens"] > 0
    log = server.log()
    assert "HEAD / 200" in log
    assert "POST /v1/messages?beta=true 200" in log


def test_full_prompt_is_too_long_for_smollm2(claude_bin, server, tmp_path):
    code, output = run_claude(claude_bin, server, tmp_path)
    assert code != 0 and output["is_error"] is True, (output, server.log()[-3000:])
    assert output["api_error_status"] == 400
    assert output["terminal_reason"] == "prompt_too_long"
    assert "Prompt is too long" in output["result"] and f"limit {SMOLLM2_CONTEXT}" in output["result"]
    assert server.wait_for_log("POST /v1/messages?beta=true 400"), server.log()[-2000:]

"""The real Codex CLI (``codex exec``) against kvgate on loopback, with the embedded model.

On the defaults, as the README's "Use with Claude Code / Codex" runs it: Codex's default
instructions (its request is ~10K tokens, over SmolLM2's trained 8,192: the default 32,768-token
context serves it) and no model name in its config (Codex asks for its own default, which is
served). The server caps output (``engine.default_max_tokens``; Codex sends no cap) to keep the
file fast. Served at the trained 8,192 only (explicitly), the overflow must reach Codex as
``context_length_exceeded``. Codex is installed from npm once into the repository's ignored
``.cache/codex``. Its custom ``exec`` tool: Codex's recorded request replayed with ``exec`` named,
and the README's ``x-kvgate-tool-choice`` header making Codex run a fenced ``exec`` call; both
calls are checked against the Lark grammar Codex sent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import llguidance
import pytest

from kvgate.plugins.lark_grammar.to_regex import lark_to_regex
from tests.clients.capture_proxy import CaptureProxy
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CODEX_DIR = REPO / ".cache" / "codex"
CODEX_VERSION = "0.171.0"  # the version the README's recipe and the schema corpus were checked with
PROMPT = "Reply with one word: yes or no?"
MAX_OUTPUT_TOKENS = 64
DEFAULTS = {"engine": {"default_max_tokens": MAX_OUTPUT_TOKENS}}  # everything else on the defaults
# Codex drops a stream with no event for 5 minutes: a cold prefill of its prompt on a busy CPU takes longer
LONG_STREAMS = "stream_idle_timeout_ms = 3600000\n"
FORCE_EXEC = 'http_headers = { "x-kvgate-tool-choice" = "exec" }\n'  # the README's tool-choice hint


def installed_version(binary: Path) -> str:
    if not binary.exists():
        return ""
    result = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    return result.stdout.strip().split(" ")[-1]


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    binary = CODEX_DIR / "node_modules" / ".bin" / "codex"
    if installed_version(binary) != CODEX_VERSION:
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed")
        CODEX_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--prefix", str(CODEX_DIR), f"@openai/codex@{CODEX_VERSION}"],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not binary.exists():
            pytest.skip(f"could not install @openai/codex from npm: {done.stderr[-500:]}")
    return binary


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("codex"), DEFAULTS) as proc:
        yield proc


def readme_config() -> str:
    """The Codex config.toml the README's "Use with Claude Code / Codex" gives, verbatim."""
    section = (REPO / "README.md").read_text().split("## Use with Claude Code / Codex")[1].split("\n## ")[0]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


def codex_config(base_url: str, websockets: bool) -> str:
    """The README's config on ``base_url``, over HTTP or WebSocket, with tools kept read-only and
    no approval prompts (top-level keys, ahead of the README's tables)."""
    config = readme_config().replace("http://127.0.0.1:8000", base_url)
    if not websockets:
        config = re.sub(r"^supports_websockets = true.*$", "supports_websockets = false", config, flags=re.M)
    assert f'base_url = "{base_url}/v1"' in config
    return ('approval_policy = "never"\nsandbox_mode = "read-only"\ncheck_for_update_on_startup = false\n'
            + config)


def run_codex(codex_bin: Path, server: ServerProcess, workdir: Path, websockets: bool,
              provider_lines: str = "") -> tuple[int, list, str]:
    """Run ``codex exec --json`` in a throwaway home (``provider_lines`` added to the README's
    provider table); return its exit code, JSON events and stderr."""
    home, codex_home, cwd = workdir / "home", workdir / "codex-home", workdir / "cwd"
    for folder in (home, codex_home, cwd):
        folder.mkdir(parents=True, exist_ok=True)
    config = codex_config(server.base_url, websockets)
    config = config.replace('wire_api = "responses"\n', 'wire_api = "responses"\n' + provider_lines)
    (codex_home / "config.toml").write_text(config)
    env = {"PATH": f"{codex_bin.parent}:{os.environ['PATH']}", "HOME": str(home), "CODEX_HOME": str(codex_home),
           "TERM": "dumb"}
    done = subprocess.run([str(codex_bin), "exec", "--skip-git-repo-check", "--json", PROMPT], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def run_until_answered(codex_bin: Path, server: ServerProcess, workdir: Path, websockets: bool):
    """``run_codex``, again (up to three runs) while the answer hit the output cap: SmolLM2 samples
    at Codex's temperature 1.0 and sometimes rambles, and Codex fails a turn that ends incomplete."""
    for attempt in range(3):
        code, events, stderr = run_codex(codex_bin, server, workdir / str(attempt), websockets)
        if code == 0 or "context window" in json.dumps(events):
            break
    return code, events, stderr


def agent_messages(events: list) -> list[str]:
    return [e["item"]["text"] for e in events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]


def turn_usage(events: list) -> dict:
    return next(e["usage"] for e in events if e.get("type") == "turn.completed")


def log_since(server, offset: int, line: str, timeout: float = 30.0) -> str:
    """The server log after ``offset``, once ``line`` is in it (a WebSocket's request line is written
    when the socket closes, which can be after the client has exited)."""
    deadline = time.monotonic() + timeout
    while line not in server.log()[offset:] and time.monotonic() < deadline:
        time.sleep(0.1)
    return server.log()[offset:]


def test_codex_exec_over_http(codex_bin, server, tmp_path):
    before = len(server.log())
    code, events, stderr = run_until_answered(codex_bin, server, tmp_path, websockets=False)
    assert code == 0, (events, stderr)
    assert agent_messages(events) and agent_messages(events)[0].strip()
    assert turn_usage(events)["input_tokens"] > 8192  # served past the trained context
    server.wait_for_log("POST /v1/responses 200")  # the line is written once the stream has closed
    log = server.log()[before:]
    assert "POST /v1/responses 200" in log and "WEBSOCKET" not in log


def test_codex_exec_over_websocket(codex_bin, server, tmp_path):
    before = len(server.log())
    code, events, stderr = run_until_answered(codex_bin, server, tmp_path, websockets=True)
    assert code == 0, (events, stderr)
    assert agent_messages(events) and agent_messages(events)[0].strip()
    log = log_since(server, before, "WEBSOCKET /v1/responses 101")
    assert log.count("WEBSOCKET /v1/responses 101") >= 1 and "POST /v1/responses" not in log
    # Codex warms the socket up, then continues from the warm-up by previous_response_id
    assert "responses websocket: warm-up" in log
    assert "responses websocket: response.create" in log and "previous_response_id resp_" in log


def test_codex_exec_tool_call_validates_against_its_grammar(codex_bin, server, tmp_path):
    """Codex's own request (recorded through a proxy as the CLI sent it) replayed with its custom
    ``exec`` tool named: the call is a ``custom_tool_call`` whose input the grammar Codex sent
    accepts (Python's ``re`` on the translated regex, and llguidance's Lark parser). SmolLM2 at
    Codex's temperature does not call tools on its own, hence the named choice."""
    with CaptureProxy(server.base_url) as proxy:
        code, events, stderr = run_codex(codex_bin, proxy, tmp_path, websockets=False, provider_lines=LONG_STREAMS)
    body = next((b for b in proxy.bodies if isinstance(b.get("input"), list)), None)
    assert body is not None, (code, events, stderr[-2000:])
    grammar = exec_grammar(body)
    replay = {**body, "stream": False, "tool_choice": {"type": "custom", "name": "exec"}, "max_output_tokens": 48}
    reply = httpx.post(server.base_url + "/v1/responses", json=replay, timeout=1800).json()
    call = next((item for item in reply.get("output", []) if item["type"] == "custom_tool_call"), None)
    assert call is not None, reply
    assert call["name"] == "exec" and call["namespace"] == "functions" and call["status"] == "completed"
    assert re.fullmatch(lark_to_regex(grammar), call["input"]), call["input"]
    assert lark_accepts(grammar, call["input"]), call["input"]


def test_codex_runs_a_forced_exec_call_and_sends_its_output(codex_bin, server, tmp_path):
    """The real loop: the README's ``x-kvgate-tool-choice`` header names ``exec``, so kvgate's first
    answer is an ``exec`` call; Codex accepts it, runs it and sends back the call (input as it got
    it, valid under the grammar it sent) with a ``custom_tool_call_output``, and the turn ends."""
    with CaptureProxy(server.base_url) as proxy:
        code, events, stderr = run_codex(codex_bin, proxy, tmp_path, websockets=False,
                                         provider_lines=LONG_STREAMS + FORCE_EXEC)
    bodies = [b for b in proxy.bodies if isinstance(b.get("input"), list)]
    follow = next((b for b in bodies if any(i.get("type") == "custom_tool_call_output" for i in b["input"])), None)
    assert follow is not None, (code, events, stderr[-2000:])
    grammar = exec_grammar(bodies[0])
    call = next(i for i in follow["input"] if i.get("type") == "custom_tool_call")
    assert call["name"] == "exec" and call.get("namespace", "functions") == "functions"
    assert any(i.get("call_id") == call["call_id"] for i in follow["input"] if i["type"] == "custom_tool_call_output")
    assert re.fullmatch(lark_to_regex(grammar), call["input"]), call["input"]
    assert lark_accepts(grammar, call["input"]), call["input"]


def exec_grammar(body: dict) -> str:
    """The Lark grammar of the ``exec`` tool in a Codex request's ``functions`` namespace."""
    tools = [t for item in body["input"] if item.get("type") == "additional_tools" for ns in item["tools"]
             for t in ns.get("tools", []) if ns.get("name") == "functions"]
    return next(t["format"]["definition"] for t in tools if t["type"] == "custom" and t["name"] == "exec")


def lark_accepts(grammar: str, text: str) -> bool:
    """llguidance's own Lark parser on ``text`` (fed as the embedded tokenizer's tokens)."""
    from kvgate.models.embedded import embedded_gguf_path
    from kvgate.models.gguf_loader import open_gguf, read_metadata
    from kvgate.models.gguf_tokenizer import build_tokenizer

    tokenizer = llguidance.LLTokenizer(build_tokenizer(read_metadata(open_gguf(embedded_gguf_path()))).to_str())
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar))
    return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


def test_codex_sees_context_overflow_in_a_small_context(codex_bin, tmp_path):
    trained = {"model": {"max_context": 8192}}  # SmolLM2's trained context, set explicitly
    with ServerProcess(tmp_path / "server", trained) as default_server:
        code, events, stderr = run_codex(codex_bin, default_server, tmp_path / "client", websockets=False)
        log = default_server.log()
    assert code != 0 and not agent_messages(events)
    failures = [e for e in events if e.get("type") == "turn.failed"]
    assert failures and "context window" in failures[0]["error"]["message"]
    assert "POST /v1/responses 200" in log

"""``kvgate agent-env claude|codex``: what it prints, what it writes under a HOME, and that the real
interactive Claude Code, started under tmux with what it wrote, reaches its input prompt with no
login, key or connection prompt."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import tomllib
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvgate.core.cli import build_cli
from kvgate.plugins.agent_env import APPROVED_KEY_CHARS, codex_config
from tests.clients.test_claude_code import claude_bin  # noqa: F401  (the installed real client)
from tests.harness import ServerProcess, write_config


def run(*args: str) -> str:
    result = CliRunner().invoke(build_cli(), ["agent-env", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def exports(output: str) -> dict[str, str]:
    pairs = (line.removeprefix("export ").split("=", 1) for line in output.splitlines() if line.startswith("export "))
    return {name: value for name, value in pairs}


def test_claude_exports_point_at_the_configured_server_with_its_key(tmp_path):
    config = write_config(tmp_path / "kvgate.toml", {"server": {"port": 9123, "api_key": "sk-local-0123456789abcdefXYZ"}},
                          tmp_path / "state")
    env = exports(run("claude", "--config", str(config)))
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9123"
    assert env["ANTHROPIC_API_KEY"] == "sk-local-0123456789abcdefXYZ"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == env["DISABLE_AUTOUPDATER"] == "1"


def test_claude_write_keeps_other_settings_and_approves_the_key_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({"theme": "dark", "customApiKeyResponses": {"rejected": ["unused"]}}))
    for _ in range(2):
        run("claude", "--url", "http://127.0.0.1:8000", "--write", "--home", str(home))
    written = json.loads((home / ".claude.json").read_text())
    assert written["theme"] == "dark" and written["hasCompletedOnboarding"] is True
    assert written["customApiKeyResponses"] == {"approved": ["unused"], "rejected": []}


def test_a_long_key_is_remembered_by_its_last_characters(tmp_path):
    config = write_config(tmp_path / "kvgate.toml", {"server": {"api_key": "k" * 10 + "0123456789abcdefghij"}},
                          tmp_path / "state")
    run("claude", "--config", str(config), "--write", "--home", str(tmp_path))
    approved = json.loads((tmp_path / ".claude.json").read_text())["customApiKeyResponses"]["approved"]
    assert approved == ["0123456789abcdefghij"] and len(approved[0]) == APPROVED_KEY_CHARS


@pytest.mark.parametrize("name,content", [(".claude.json", "{not json"), (".claude.json", "[1, 2]"),
                                          (".codex/config.toml", "model = [unclosed")])
def test_a_file_that_does_not_parse_is_left_alone(tmp_path, name, content):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    agent = "claude" if name == ".claude.json" else "codex"
    result = CliRunner().invoke(build_cli(), ["agent-env", agent, "--write", "--home", str(tmp_path)])
    assert result.exit_code == 1 and str(path) in result.output and "left as it is" in result.output
    assert path.read_text() == content


def test_codex_config_on_a_fresh_home_selects_the_provider(tmp_path):
    output = run("codex", "--url", "http://127.0.0.1:8001", "--write", "--home", str(tmp_path))
    assert '[model_providers.kvgate]' in output
    config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
    assert config["model_provider"] == "kvgate"
    assert config["model_providers"]["kvgate"]["base_url"] == "http://127.0.0.1:8001/v1"
    assert config["model_providers"]["kvgate"]["wire_api"] == "responses"
    assert config["analytics"] == {"enabled": False} and config["features"] == {"plugins": False, "apps": False}


def test_codex_config_keeps_a_chosen_provider_and_existing_tables():
    existing = 'model_provider = "ollama"\n\n[features]\nplugins = true\n'
    updated = tomllib.loads(codex_config(existing, "http://127.0.0.1:8000", needs_key=True))
    assert updated["model_provider"] == "ollama" and updated["features"] == {"plugins": True}
    assert updated["model_providers"]["kvgate"]["env_key"] == "KVGATE_API_KEY"
    assert codex_config(codex_config(existing, "u", False), "u", False) == codex_config(existing, "u", False)


# --- the real interactive Claude Code under tmux -------------------------------------------------


def screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def wait_for_screen(session: str, texts: tuple[str, ...], timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = screen(session)
        if any(text in shown for text in texts):
            return shown
        time.sleep(1)
    return screen(session)


def start_claude(claude: Path, home: Path, env: dict[str, str]) -> str:
    """Interactive ``claude`` in a new tmux session (its name returned), as a person starts it."""
    session = f"kvgate-test-{uuid.uuid4().hex[:8]}"
    work = home / "work"
    work.mkdir(parents=True, exist_ok=True)
    variables = [f"{name}={value}" for name, value in env.items()]
    command = ["env", "-i", f"PATH={Path(shutil.which('node')).parent}:/usr/bin:/bin", f"HOME={home}",
               "TERM=xterm-256color", *variables, str(claude)]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", str(work), *command],
                   check=True)
    return session


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("node") is None, reason="needs tmux and node")
def test_interactive_claude_code_reaches_its_prompt_on_a_fresh_home(tmp_path, claude_bin):  # noqa: F811
    with ServerProcess(tmp_path / "server") as server:
        written, bare = tmp_path / "written", tmp_path / "bare"
        env = exports(run("claude", "--url", server.base_url, "--write", "--home", str(written)))
        bare.mkdir()  # control: onboarding done by hand, the key not approved
        (bare / ".claude.json").write_text('{"hasCompletedOnboarding": true}')
        sessions = [start_claude(claude_bin, written, env), start_claude(claude_bin, bare, env)]
        try:
            shown = [wait_for_screen(session, ("trust this folder",)) for session in sessions]
            assert all("trust this folder" in text for text in shown), shown
            for session in sessions:
                subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True)
            ready = wait_for_screen(sessions[0], ("? for shortcuts",))
            asked = wait_for_screen(sessions[1], ("Do you want to use this API key?",))
        finally:
            for session in sessions:
                subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "? for shortcuts" in ready and "API key" not in ready and "Failed to connect" not in ready, ready
    assert "Do you want to use this API key?" in asked, asked  # what --write spares a person

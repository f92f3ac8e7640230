"""The real Codex CLI's remote compaction against kvgate, end to end (embedded SmolLM2).

Codex compacts remotely only for providers it takes for OpenAI or Azure (by name or base URL;
others get its inline compaction, a plain summary request), and sends v2's ``compaction_trigger``
item on ``POST /responses`` with its ``remote_compaction_v2`` feature. So the README's provider is
named ``azure`` here, the feature is on, and a low ``model_auto_compact_token_limit`` makes the
second of two ``codex exec`` runs of one session (``resume --last``) compact before its turn: Codex
accepts exactly one ``compaction`` item (it has no fallback), sends it back opaque, and the turn
after it is served with its prefix cached. Codex's base instructions are replaced by a one-line
file (``model_instructions_file``) to keep its cold prompt, and so the test, short.

SmolLM2 samples at Codex's temperature 1.0 from a prompt that holds the date and the test's paths, so
a reply sometimes runs into the output cap that keeps the test fast; Codex then fails that turn
(exit 1) after taking the reply. That says nothing of compaction, so a run may end either way, but
only the cap may stop it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvgate.adapters.responses.compaction_item import PREFIX
from tests.adapters.test_responses_render import check_event_stream, parse_sse
from tests.clients.capture_proxy import CaptureProxy
from tests.clients.test_codex import LONG_STREAMS, agent_messages, codex_bin, codex_config  # noqa: F401 (fixture)
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SETTINGS = {"engine": {"default_max_tokens": 64}, "cache": {"cached_tokens_granularity": 1}}
REMOTE = 'model_auto_compact_token_limit = 2000\nmodel_instructions_file = "instructions.md"\n'
PROMPTS = ("Reply with one word: yes or no?", "Now reply with one word: maybe.")


def session_config(base_url: str, codex_home: Path) -> str:
    (codex_home / "instructions.md").write_text("You are a coding agent. Answer briefly.\n")
    config = codex_config(base_url, websockets=False).replace('name = "kvgate"', 'name = "azure"', 1)
    config = config.replace('wire_api = "responses"\n', 'wire_api = "responses"\n' + LONG_STREAMS, 1)
    assert 'name = "azure"' in config and "[features]\n" in config
    return REMOTE.replace("instructions.md", str(codex_home / "instructions.md")) + \
        config.replace("[features]\n", "[features]\nremote_compaction_v2 = true\n", 1)


def run_session(codex_bin: Path, base_url: str, workdir: Path) -> list[tuple[int, list, str]]:
    """Two ``codex exec --json`` runs of one session; each run's exit code, events and stderr."""
    home, codex_home, cwd = workdir / "home", workdir / "codex-home", workdir / "cwd"
    for folder in (home, codex_home, cwd):
        folder.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(session_config(base_url, codex_home))
    env = {"PATH": f"{codex_bin.parent}:{os.environ['PATH']}", "HOME": str(home), "CODEX_HOME": str(codex_home),
           "TERM": "dumb"}
    runs = []
    for resume, prompt in zip(([], ["resume", "--last"]), PROMPTS):
        done = subprocess.run([str(codex_bin), "exec", "--skip-git-repo-check", "--json", *resume, prompt], env=env,
                              cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1500)
        runs.append((done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")],
                     done.stderr))
    return runs


CAPPED = "Incomplete response returned, reason: max_output_tokens"


def ended_or_capped(code: int, events: list) -> bool:
    """The run ended well, or only the output cap failed its turn."""
    errors = [event.get("message") or event.get("error", {}).get("message")
              for event in events if event.get("type") in ("error", "turn.failed")]
    return (code == 0 and not errors) or (code == 1 and set(errors) == {CAPPED})


def is_trigger(body: dict) -> bool:
    return any(item.get("type") == "compaction_trigger" for item in body.get("input") or [])


def test_codex_compacts_remotely_and_continues_with_its_prefix_cached(codex_bin, tmp_path):
    with ServerProcess(tmp_path / "server", SETTINGS) as server, CaptureProxy(server.base_url) as proxy:
        runs = run_session(codex_bin, proxy.base_url, tmp_path / "client")
    assert all(ended_or_capped(code, events) for code, events, _ in runs), [(code, events, stderr[-2000:])
                                                                             for code, events, stderr in runs]
    assert agent_messages(runs[1][1]), runs[1][1]
    exchanges = [(body, reply) for body, reply in proxy.replies if isinstance(body.get("input"), list)]
    triggers = [index for index, (body, _) in enumerate(exchanges) if is_trigger(body)]
    assert len(triggers) == 1, [[item.get("type") for item in body["input"]] for body, _ in exchanges]
    compaction = check_event_stream(parse_sse(exchanges[triggers[0]][1].decode()))
    assert [item["type"] for item in compaction["output"]] == ["compaction"]
    follow_body, follow_reply = exchanges[triggers[0] + 1]  # the turn after the compaction
    sent_back = [item for item in follow_body["input"] if item.get("type") == "compaction"]
    assert len(sent_back) == 1 and sent_back[0]["encrypted_content"] == compaction["output"][0]["encrypted_content"]
    assert sent_back[0]["encrypted_content"].startswith(PREFIX)
    answered = check_event_stream(parse_sse(follow_reply.decode()))
    capped = answered["status"] == "incomplete" and answered["incomplete_details"] == {"reason": "max_output_tokens"}
    assert answered["status"] == "completed" or (capped and runs[1][0] == 1), answered
    assert answered["usage"]["input_tokens_details"]["cached_tokens"] > 0, answered["usage"]

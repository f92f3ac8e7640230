"""SIGTERM/SIGINT drain on a real server process, one-line config errors, and ``kvgate plugins``
without loading weights."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.harness import ServerProcess, write_config

pytestmark = pytest.mark.slow
LONG = "Write a very long story about a lighthouse keeper, chapter after chapter."
STREAMS = {  # path, body, headers, what its last event must be
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "max_tokens": 3000,
                                      "stream": True, "ignore_eos": True}, {}),
    "responses": ("/v1/responses", {"input": LONG, "max_output_tokens": 3000, "stream": True}, {}),
    "anthropic": ("/v1/messages", {"model": "claude-opus-4-8", "max_tokens": 3000, "stream": True,
                                   "messages": [{"role": "user", "content": LONG}]}, {"anthropic-version": "2023-06-01"}),
}


def read_stream(server, name, started, lines):
    path, body, headers = STREAMS[name]
    try:
        with httpx.stream("POST", server.base_url + path, json=body, headers=headers, timeout=60) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                if len(lines) > 6:
                    started.set()
    except httpx.HTTPError as exc:
        lines.append(f"transport error: {exc!r}")
    started.set()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_open_streams_and_exits(tmp_path, sig):
    server = ServerProcess(tmp_path, {"cache": {"enabled": False}, "guard": {"enabled": False}}).start()
    try:
        read = {name: [] for name in STREAMS}
        started = {name: threading.Event() for name in STREAMS}
        threads = [threading.Thread(target=read_stream, args=(server, name, started[name], read[name]))
                   for name in STREAMS]
        for thread in threads:
            thread.start()
        for name in STREAMS:
            assert started[name].wait(120), (name, server.log()[-2000:])
        signalled = time.monotonic()
        server.proc.send_signal(sig)
        for thread in threads:
            thread.join(30)
        server.proc.wait(timeout=15)
        exited = time.monotonic() - signalled
    finally:
        server.kill()
    assert exited < 10, exited
    chat, responses, anthropic = (read[name] for name in ("chat", "responses", "anthropic"))
    assert chat[-1] == "data: [DONE]" and any(line.startswith('data: {"error"') for line in chat[-4:]), chat[-4:]
    assert "event: response.failed" in responses[-4:], responses[-4:]
    assert "event: error" in anthropic[-4:], anthropic[-4:]
    log = server.log()
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    assert "stream ended in an error" in log


def run_cli(tmp_path, settings, *args):
    config = write_config(tmp_path / "kvgate.toml", settings, tmp_path / "state")
    return subprocess.run([sys.executable, "-m", "kvgate.core.cli", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=300)


def test_a_context_past_the_trained_one_without_the_flag_is_a_one_line_error(tmp_path):
    result = run_cli(tmp_path, {"model": {"max_context": 16384}}, "serve")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "INFO" not in line]
    assert errors == ["Error: model.max_context 16384 exceeds the trained context 8192; set "
                      "model.allow_context_extension = true to serve past it (quality degrades)"], result.stderr


def test_plugins_describes_the_model_without_loading_weights(tmp_path):
    result = run_cli(tmp_path, {}, "plugins", "--json")
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)["model"]
    assert model == {"name": "smollm2", "architecture": "llama", "dialect": "chatml_json",
                     "dialect_variant": model["dialect_variant"], "chat_format": "jinja"}
    assert not (tmp_path / "state").exists()  # no converted weights were written
    assert "dequantizing" not in result.stderr and "reading weights" not in result.stderr

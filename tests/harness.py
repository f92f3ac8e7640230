"""Start and stop a real kvgate server process on 127.0.0.1 for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_table_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, dict) for v in value)


def write_config(path: Path, settings: dict[str, dict[str, Any]], state_dir: Path) -> Path:
    """A TOML file; a list of dicts under a key becomes an array of tables (``[[server.keys]]``)."""
    lines = [f"state_dir = {_toml_value(str(state_dir))}"]
    for section, values in settings.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items() if not _is_table_list(value))
        for key, tables in ((k, v) for k, v in values.items() if _is_table_list(v)):
            for table in tables:
                lines.append(f"[[{section}.{key}]]")
                lines.extend(f"{name} = {_toml_value(value)}" for name, value in table.items())
    path.write_text("\n".join(lines) + "\n")
    return path


SHARED_WEIGHTS_ENV = "KVGATE_TEST_MODEL_CACHE"


def with_shared_weights(settings: dict) -> dict:
    """``settings`` with ``[model] weights_cache_dir`` set to ``$KVGATE_TEST_MODEL_CACHE`` when that is
    set and the test sets no folder of its own: test servers then convert the embedded model once."""
    shared = os.environ.get(SHARED_WEIGHTS_ENV)
    model = settings.get("model", {})
    if not shared or "weights_cache_dir" in model:
        return settings
    return {**settings, "model": {**model, "weights_cache_dir": shared}}


_RUNNING: set["ServerProcess"] = set()
STOP_WAIT_S = 30  # how long stop() waits for a SIGINT'd server to exit before it kills it


def _stop_running_on_sigterm() -> None:
    """When the test process is told to end (``timeout`` sends SIGTERM), stop the servers it started
    first: they run in sessions of their own, so nothing else would."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def stop_all(signum, frame) -> None:
        for server in list(_RUNNING):
            if server.proc is not None and server.proc.poll() is None:
                server.proc.kill()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop_all)


class ServerProcess:
    """A `kvgate serve` child process. Stops by itself when the test ends (or at `stop()`), and when
    the test process gets SIGTERM."""

    def __init__(self, workdir: Path, settings: Optional[dict] = None, port: Optional[int] = None,
                 state_dir: Optional[Path] = None, env: Optional[dict] = None, timeout: float = 180):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.state_dir = Path(state_dir or self.workdir / "state")
        self.config_path = write_config(self.workdir / "kvgate.toml", with_shared_weights(settings or {}),
                                        self.state_dir)
        self.log_path = self.workdir / f"server-{self.port}.log"
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ServerProcess":
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "kvgate.core.cli", "serve", "--config", str(self.config_path),
               "--host", "127.0.0.1", "--port", str(self.port)]
        _stop_running_on_sigterm()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.workdir, start_new_session=True)
        _RUNNING.add(self)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"server did not become healthy in {self.timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 10.0) -> bool:
        """Whether ``text`` appears in the log within ``timeout`` (request lines follow the response)."""
        deadline = time.time() + timeout
        while text not in self.log():
            if time.time() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        _RUNNING.discard(self)
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

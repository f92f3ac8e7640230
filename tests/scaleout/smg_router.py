"""Start and stop the real SMG router (``smg launch``) on 127.0.0.1 in front of kvgate workers."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

from tests.harness import free_port


def smg_command() -> list[str]:
    """The ``smg`` console script of this environment, else ``python -m smg`` (smg is a test
    dependency; an environment that has the package on its path may lack the script)."""
    beside = Path(sys.executable).with_name("smg")
    found = str(beside) if beside.exists() else shutil.which("smg")
    if found:
        return [found]
    if importlib.util.find_spec("smg") is None:
        raise RuntimeError("smg is not installed: it is a test dependency (pip install smg)")
    return [sys.executable, "-m", "smg"]


class SmgRouter:
    """``smg launch --policy POLICY`` over ``worker_urls``; stops itself at ``stop()`` / exit."""

    def __init__(self, workdir: Path, worker_urls: list[str], policy: str = "cache_aware",
                 api_key: str = "", extra_args: Optional[list[str]] = None, timeout: float = 60):
        self.workdir, self.worker_urls, self.policy = Path(workdir), worker_urls, policy
        self.port, self.metrics_port = free_port(), free_port()
        self.api_key, self.timeout = api_key, timeout
        self.extra_args = [*(["--api-key", api_key] if api_key else []), *(extra_args or [])]
        self.log_path = self.workdir / f"smg-{self.port}.log"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "SmgRouter":
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = [*smg_command(), "launch", "--host", "127.0.0.1", "--port", str(self.port),
               "--worker-urls", *self.worker_urls, "--policy", self.policy,
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
               "--log-level", "debug", *self.extra_args]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                     start_new_session=True, env={**os.environ, "NO_COLOR": "1"})
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"smg exited with {self.proc.returncode}:\n{self.log()}")
            if self.healthy_workers() >= len(self.worker_urls):
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"smg did not register {len(self.worker_urls)} workers in {self.timeout}s:\n{self.log()}")

    @property
    def headers(self) -> dict[str, str]:
        """SMG's ``--api-key`` guards its own routes too; clients send it as a Bearer token."""
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def healthy_workers(self) -> int:
        try:
            reply = httpx.get(self.base_url + "/workers", timeout=2, headers=self.headers)
        except httpx.HTTPError:
            return 0
        if reply.status_code != 200:
            return 0
        body = reply.json()
        workers = body.get("workers", body) if isinstance(body, dict) else body
        return sum(1 for w in workers if isinstance(w, dict) and w.get("is_healthy", True)) if isinstance(workers, list) else 0

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def __enter__(self) -> "SmgRouter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

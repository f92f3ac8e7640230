"""One setup of ``bench_smg_sessions.py``: real kvgate workers behind the real SMG router, and the
accounting of each request (the worker that served it, its prompt tokens by source, exact, from
that worker's ``/metrics`` ``kvgate_prompt_tokens_total{source=computed|device|ssd}``)."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx

from agent_workload import stream_chat
from tests.harness import ServerProcess
from tests.scaleout.smg_router import SmgRouter

SOURCES = ("computed", "device", "ssd")
# SMG probes every second and takes one failed probe as unhealthy, so a killed worker leaves the
# rotation within a few seconds (its default: 3 failures 60 s apart)
SMG_HEALTH = ["--health-check-interval-secs", "1", "--health-failure-threshold", "1"]


@dataclass(frozen=True)
class Setup:
    name: str
    workers: int
    policy: str
    shared_ssd: bool
    kill_turn: Optional[int] = None


def prompt_sources(url: str) -> dict[str, float]:
    found = dict.fromkeys(SOURCES, 0.0)
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith('kvgate_prompt_tokens_total{source="'):
            found[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return found


class Cluster:
    """``setup.workers`` workers (one ``ssd_path`` for all when ``setup.shared_ssd``, else each its
    own under its state dir) and ``smg launch --policy setup.policy`` in front of them."""

    def __init__(self, setup: Setup, out: Path, smg_args: Optional[list[str]] = None):
        self.setup, root = setup, out / setup.name
        shutil.rmtree(root, ignore_errors=True)
        cache = {"ssd_path": str(root / "shared-ssd")} if setup.shared_ssd else {}
        settings = {"model": {"threads": 2}, "cache": cache}
        self.workers = [ServerProcess(root / f"w{i}", settings, timeout=600) for i in range(setup.workers)]
        self.router = SmgRouter(root / "router", [w.base_url for w in self.workers], policy=setup.policy,
                                extra_args=[*SMG_HEALTH, *(smg_args or [])], timeout=120)

    def start(self) -> "Cluster":
        for worker in self.workers:
            worker.start()
        self.router.start()
        return self

    def stop(self) -> None:
        self.router.stop()
        for worker in self.workers:
            worker.stop()

    def live(self) -> list[ServerProcess]:
        return [w for w in self.workers if w.proc and w.proc.poll() is None]

    def ask(self, messages: list[dict], max_tokens: int) -> dict:
        """One streamed request through SMG; retried (up to 90 s) while SMG still picks a dead worker."""
        before = {w.base_url: prompt_sources(w.base_url) for w in self.live()}
        deadline, attempts = time.time() + 90, 0
        while True:
            attempts += 1
            try:
                result = stream_chat(self.router.base_url, messages, max_tokens)
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        after = prompt_sources(result["worker"])
        split = {s: int(after[s] - before[result["worker"]][s]) for s in SOURCES}
        return {**result, "attempts": attempts, "sources": split}

    def kill(self, holder: ServerProcess) -> None:
        """SIGKILL ``holder`` once its SSD writer is idle, then wait until SMG marks it unhealthy."""
        deadline = time.time() + 60
        while time.time() < deadline and ssd_pending(holder) > 0:
            time.sleep(0.1)
        holder.kill()
        deadline = time.time() + 60
        while time.time() < deadline and self.router.healthy_workers() >= len(self.workers):
            time.sleep(0.25)

    def worker_at(self, url: str) -> ServerProcess:
        return next(w for w in self.workers if w.base_url == url)


def ssd_pending(worker: ServerProcess) -> int:
    return httpx.get(worker.base_url + "/cache/diagnostics", timeout=30).json()["ssd"]["pending_bytes"]

"""The real kvgate app (``create_app`` with a given plugin manager) served by uvicorn on 127.0.0.1,
in a thread of the test process -- for plugins that exist only in the test."""

from __future__ import annotations

import threading
import time

import uvicorn

from kvgate.core.http.app import create_app
from tests.harness import free_port


class AppServer:
    def __init__(self, config, pm, timeout: float = 180):
        self.port, self.timeout = free_port(), timeout
        self.app = create_app(config, pm)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="kvgate-test-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "AppServer":
        self.thread.start()
        deadline = time.monotonic() + self.timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True  # runs the app's shutdown: the cache backs up and closes its tiers
        self.thread.join(timeout=120)

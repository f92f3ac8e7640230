"""A headless Chromium (Debian's ``/usr/bin/chromium``) driven over the Chrome DevTools protocol.

Started with a fresh profile folder and ``--remote-debugging-port=0`` (Chromium writes the port it
chose into ``DevToolsActivePort`` there); one page target is driven over its WebSocket with
``websockets``. Script errors are collected as they arrive: uncaught exceptions, ``console.error``
calls and the browser's own error log entries (a Content-Security-Policy refusal, a script that
failed to parse), except failed network requests (a 401 the page answers by asking for a key).
Only the process this class started is ever stopped.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Optional

import httpx
from websockets.sync.client import connect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         "--window-size=1280,1100"]


class HeadlessChromium:
    def __init__(self, profile: Path, timeout: float = 60):
        self.profile, self.timeout = profile, timeout
        self.proc: Optional[subprocess.Popen] = None
        self.socket = None
        self.ids = itertools.count(1)
        self.errors: list[str] = []

    def start(self) -> "HeadlessChromium":
        self.profile.mkdir(parents=True, exist_ok=True)
        log = open(self.profile.parent / "chromium.log", "ab")
        self.proc = subprocess.Popen([str(CHROMIUM), *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        port = self._port()
        page = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page")
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=self.timeout)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        return self

    def _port(self) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise RuntimeError("chromium opened no DevTools port")

    def call(self, method: str, params: Optional[dict] = None) -> dict:
        """Send one command and return its result; events read meanwhile are noted."""
        ident = next(self.ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            message = json.loads(self.socket.recv(timeout=max(deadline - time.time(), 0.1)))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)
        raise TimeoutError(method)

    def _note(self, event: dict) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", ""))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(arg.get("value", arg.get("description"))) for arg in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error" \
                and params["entry"].get("source") != "network":
            self.errors.append(params["entry"]["text"])

    def open(self, url: str, arrives_at: str) -> None:
        """Navigate to ``url`` and wait until the document at path ``arrives_at`` has loaded."""
        self.call("Page.navigate", {"url": url})
        self.wait_for(f"location.pathname === {json.dumps(arrives_at)} && document.readyState === 'complete'")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30, accept: Callable[[Any], bool] = bool) -> Any:
        """The value of ``expression`` once ``accept`` takes it (polled; TimeoutError with the last value)."""
        deadline, value = time.time() + timeout, None
        while time.time() < deadline:
            value = self.evaluate(expression)
            if accept(value):
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression} stayed {value!r}")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def stop(self) -> None:
        if self.socket is not None:
            self.socket.close()
        if self.proc is not None and self.proc.poll() is None:
            # its own session: the group holds this browser and the helpers it spawned, nothing else
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def __enter__(self) -> "HeadlessChromium":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

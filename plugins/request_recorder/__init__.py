"""Plugin: the request recorder (``[server] record_path``): one JSON line per finished generation.

Each line holds what a cache analysis needs and nothing a client could not see itself: the time,
the cache namespace, the prompt's token ids, the generated token ids, the cached prompt tokens
(device and SSD, exact, not rounded), the finish reason and the time to first token in seconds
(null when nothing was generated, e.g. a warm-up). The prompt is stored in clear: a debugging
and benchmarking aid (``bench/agent_sessions.py`` reads it), off by default.

A request observer (``register_request_observers``): it writes from the host's
:class:`kvgate.core.request_trace.RequestTrace`, built only when ``record_path`` is set.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Optional

from kvgate.core.hookspecs import hookimpl
from kvgate.core.request_trace import RequestTrace


class RequestRecorder:
    """Appends records to ``path`` (created with its folder); safe to call from any thread."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()

    def record(self, namespace: str, prompt: list[int], output: list[int], cached_device: int, cached_ssd: int,
               reason: str, ttft: Optional[float]) -> None:
        line = json.dumps({"time": time.time(), "namespace": namespace, "prompt": list(prompt), "output": list(output),
                           "cached_device": cached_device, "cached_ssd": cached_ssd, "reason": reason,
                           "ttft_s": None if ttft is None else round(ttft, 4)})
        with self.lock, self.path.open("a") as out:
            out.write(line + "\n")

    def request_finished(self, trace: RequestTrace) -> None:
        self.record(trace.namespace, trace.prompt, trace.output, trace.cached_device, trace.cached_ssd,
                    trace.finish_reason, trace.ttft_s)


def recorder_for(ctx) -> Optional[RequestRecorder]:
    """A recorder when ``[server] record_path`` is set, else None."""
    path = ctx.config.server.record_path
    return RequestRecorder(path) if path else None


@hookimpl
def register_request_observers(register):
    register("request_recorder", recorder_for)

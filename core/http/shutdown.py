"""SIGINT/SIGTERM drain: the uvicorn server that tells the engine to end in-flight requests first.

On the first signal the engine drains (:meth:`kvgate.core.engine.engine.Engine.drain`): every
in-flight request ends with an error, which each protocol sends as its error event (a streamed
request gets a terminal event rather than a cut-off body), and new requests are refused with 503.
uvicorn then closes the connections and exits; ``timeout_graceful_shutdown`` bounds the wait.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import uvicorn

log = logging.getLogger("kvgate")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Callable[[], None]):
        super().__init__(config)
        self._drain = drain
        self._drained = False

    def handle_exit(self, sig, frame) -> None:
        if not self._drained:
            self._drained = True
            log.info("shutting down: ending in-flight requests")
            # from a signal handler: the engine's lock may be held by this very thread, so drain elsewhere
            threading.Thread(target=self._drain, name="kvgate-drain", daemon=True).start()
        super().handle_exit(sig, frame)

"""SIGINT/SIGTERM drain: the uvicorn server that tells the engine to end in-flight requests first.

When uvicorn's main loop sees the signal (within its 0.1 s tick) and begins shutting down, the engine
drains (:meth:`kvgate.core.engine.engine.Engine.drain`): every in-flight request ends with an error,
which each protocol sends as its error event (a streamed request gets a terminal event rather than
a cut-off body), and new requests are refused with 503. uvicorn then closes the connections and
exits; ``timeout_graceful_shutdown`` bounds the wait.

The signal handler itself only sets uvicorn's flags. Python runs it on the main thread between two
bytecodes of whatever that thread was doing, which may hold a lock that is not reentrant: a log
line written from the handler while the event loop was enqueueing a request's log line waited for
the log queue's own lock forever, and the server never exited. So the log line and the drain run
from the event loop, at the start of :meth:`DrainingServer.shutdown`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Callable, Optional

import uvicorn

log = logging.getLogger("kvgate")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Callable[[], None]):
        """``drain()``: end every in-flight request with an error and refuse new ones (it waits for the
        engine's lock, so it runs on a worker thread the event loop awaits, never in the signal handler)."""
        super().__init__(config)
        self._drain = drain

    async def shutdown(self, sockets: Optional[list[socket.socket]] = None) -> None:
        log.info("shutting down: ending in-flight requests")
        await asyncio.to_thread(self._drain)
        await super().shutdown(sockets=sockets)

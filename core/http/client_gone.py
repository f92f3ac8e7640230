"""Cancel a request's work when its client leaves first (HTTP disconnect or a closed WebSocket).

Cancelling the work closes the pipeline's event stream, which cancels the sequence in the engine:
nothing keeps generating for a client that is gone.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable


async def http_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    """Returns when the ASGI connection reports ``http.disconnect``."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_gone_first(work: Awaitable[Any], gone: Awaitable[Any]) -> asyncio.Future:
    """Run ``work`` until it ends or ``gone`` completes first; returns the work's future, cancelled
    when the client left first (read its result only when it is not)."""
    task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(gone)
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return task

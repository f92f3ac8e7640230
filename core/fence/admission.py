"""Building a request's fence before it is admitted: on a worker thread, within a time budget.

Schema checks and grammar compilation run on a small thread pool (llguidance compiles outside the
GIL), never on the event loop nor the engine thread, so a costly constraint delays only its own
request. A build that takes longer than ``[fence] compile_budget_s`` gets a 400 naming the tools
(the build goes on in the background and its grammar is cached, so a retry is fast). Every
error a constraint can cause surfaces here, as the protocol's 400, before generation starts.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from kvgate.core.fence.errors import FenceRequestError

log = logging.getLogger("kvgate.fence")
WORKERS = 4


class FenceAdmission:
    """``build(request)`` as a callable (the engine-neutral sync form, for tests and benches) and
    ``await admit(request)`` (the server's form)."""

    def __init__(self, build: Callable[[Any], Any], budget_s: float, workers: int = WORKERS):
        self.build = build
        self.budget_s = budget_s
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvgate-fence")

    def __call__(self, request) -> Optional[Any]:
        return self.build(request)

    async def admit(self, request) -> Optional[Any]:
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self.pool, self.build, request)
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.budget_s)
        except asyncio.TimeoutError:
            work.add_done_callback(_quiet)
            names = ", ".join(repr(tool.name) for tool in request.tools[:5]) or "response_format"
            names += f" and {len(request.tools) - 5} more tools" if len(request.tools) > 5 else ""
            log.warning("fence for %s over its %.1fs compile budget; request refused", names, self.budget_s)
            raise FenceRequestError(f"the constraint of {names} did not compile within {self.budget_s:g} s "
                                    f"([fence] compile_budget_s); simplify its schema", param="tools") from None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _quiet(future) -> None:
    """Consume a late build's exception (its request is already answered)."""
    if not future.cancelled():
        future.exception()

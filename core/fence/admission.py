"""Building a request's fence before it is admitted: on a worker thread, within a time budget.

Schema checks and grammar compilation run on a small thread pool (llguidance compiles outside the
GIL), never on the event loop nor the engine thread, so a costly constraint delays only its own
request. A request that constrains nothing (its fence holds only the generation guards, which
compile nothing) is built on a lane of its own, so it never queues behind schema compiles. A
tenant has at most ``TENANT_BUILDS`` builds on the workers at once (its others wait their turn),
so one tenant's costly schemas leave workers, and CPU, to the others. The cheap schema size
limits (``check``: the schema preparer's, :mod:`kvgate.core.fence.schema_preparer`) are checked on
the fast lane before a build queues, so an absurd schema gets its 400 at once, whatever its tenant
has queued.

The budget, ``[fence] compile_budget_s``, runs from when a worker starts the build. A build that
takes longer gets a 400 naming the tools, and is cancelled (:mod:`kvgate.core.fence.cancel`): it
stops at its next checkpoint, so an over-budget schema cannot hold the workers that others need.
What it finished stays cached (the patterns it probed, a grammar whose native compile was under
way), so a retry resumes. A build that waits for a worker longer than ``QUEUE_BUDGETS`` budgets
is dropped with a 503 and ``Retry-After``. Every error a constraint can cause surfaces here, in
the protocol's shape, before generation starts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from kvgate.core.errors import Overloaded
from kvgate.core.fence.cancel import cancellable
from kvgate.core.fence.errors import FenceRequestError

log = logging.getLogger("kvgate.fence")
WORKERS = 4
GUARD_WORKERS = 2
QUEUE_BUDGETS = 5  # the longest a build waits for a worker, in compile budgets
TENANT_BUILDS = 1  # one tenant's builds on the workers at once


def compiles_a_constraint(request) -> bool:
    """Whether the request's fence may compile a grammar (tools or a JSON response format)."""
    return bool(request.tools) or request.response_format.type != "text"


class FenceAdmission:
    """``build(request)`` as a callable (the engine-neutral sync form, for tests and benches) and
    ``await admit(request)`` (the server's form). ``check(request)`` raises for a request refused
    before its build queues."""

    def __init__(self, build: Callable[[Any], Any], budget_s: float, workers: int = WORKERS,
                 check: Callable[[Any], None] = lambda request: None):
        self.build, self.check = build, check
        self.budget_s = budget_s
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvgate-fence")
        self.guard_pool = ThreadPoolExecutor(max_workers=GUARD_WORKERS, thread_name_prefix="kvgate-guards")
        self.tenant_slots: dict[str, asyncio.Semaphore] = {}  # used on the event loop only

    def __call__(self, request) -> Optional[Any]:
        return self.build(request)

    async def admit(self, request) -> Optional[Any]:
        if not compiles_a_constraint(request):
            return await self._run(self.guard_pool, request)
        await asyncio.get_running_loop().run_in_executor(self.guard_pool, self.check, request)
        slots = self.tenant_slots.setdefault(request.tenant.name, asyncio.Semaphore(TENANT_BUILDS))
        queued_until = asyncio.get_running_loop().time() + self.budget_s * QUEUE_BUDGETS
        try:
            await asyncio.wait_for(slots.acquire(), self.budget_s * QUEUE_BUDGETS)
        except asyncio.TimeoutError:
            raise _queue_full() from None
        return await self._run(self.pool, request, queued_until, slots.release)

    async def _run(self, pool: ThreadPoolExecutor, request, queued_until: Optional[float] = None,
                   release: Callable[[], Any] = lambda: None) -> Optional[Any]:
        """Build on ``pool``; ``release`` once the build is over (done or stopped), not before."""
        loop = asyncio.get_running_loop()
        started, cancelled = asyncio.Event(), threading.Event()
        work = loop.run_in_executor(pool, self._build_until_cancelled, request, cancelled,
                                    lambda: loop.call_soon_threadsafe(started.set))
        work.add_done_callback(lambda _: release())
        queue_s = self.budget_s * QUEUE_BUDGETS if queued_until is None else max(queued_until - loop.time(), 0.01)
        try:
            await asyncio.wait_for(started.wait(), queue_s)
        except asyncio.TimeoutError:
            _stop(work, cancelled)  # it stops before any work when a worker takes it
            raise _queue_full() from None
        except asyncio.CancelledError:  # the client went away
            _stop(work, cancelled)
            raise
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.budget_s)
        except asyncio.TimeoutError:
            _stop(work, cancelled)
            raise self._over_budget(request) from None
        except asyncio.CancelledError:
            _stop(work, cancelled)
            raise

    def _build_until_cancelled(self, request, cancelled: threading.Event, on_start: Callable[[], Any]) -> Optional[Any]:
        on_start()
        with cancellable(cancelled):
            return self.build(request)

    def _over_budget(self, request) -> FenceRequestError:
        names = ", ".join(repr(tool.name) for tool in request.tools[:5]) or "response_format"
        names += f" and {len(request.tools) - 5} more tools" if len(request.tools) > 5 else ""
        log.warning("fence for %s over its %.1fs compile budget; request refused, build cancelled", names,
                    self.budget_s)
        return FenceRequestError(f"the constraint of {names} did not compile within {self.budget_s:g} s "
                                 f"([fence] compile_budget_s); simplify its schema", param="tools")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.guard_pool.shutdown(wait=False, cancel_futures=True)


def _stop(work: asyncio.Future, cancelled: threading.Event) -> None:
    """Cancel a build nobody waits for any more; its late outcome is consumed quietly."""
    cancelled.set()
    work.add_done_callback(_quiet)


def _queue_full() -> Overloaded:
    return Overloaded("The fence compile queue is full; retry shortly.", retry_after=2)


def _quiet(future) -> None:
    """Consume a late build's exception (its request is already answered)."""
    if not future.cancelled():
        future.exception()

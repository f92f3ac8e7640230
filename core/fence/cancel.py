"""Cancelling a fence build whose request was already answered (it ran past its budget).

A build thread cannot be stopped from outside, so the build checks in: :func:`checkpoint` raises
:class:`BuildCancelled` once the build's request has given up on it. The schema preparation calls
it between its steps and before each pattern it test-compiles; a build still queued when its
request gives up stops before any work. What finished before the cancel stays cached (patterns
already probed, compiled grammars), so a retry resumes rather than starts over.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from kvgate.core.fence.errors import FenceRequestError

_current = threading.local()


class BuildCancelled(FenceRequestError):
    """The build's request stopped waiting for it; nobody reads this error."""


@contextlib.contextmanager
def cancellable(cancelled: threading.Event) -> Iterator[None]:
    """Run a build on this thread that stops at its next checkpoint once ``cancelled`` is set."""
    _current.cancelled = cancelled
    try:
        checkpoint()
        yield
    finally:
        _current.cancelled = None


def checkpoint() -> None:
    """Raise BuildCancelled when this thread's build was cancelled; nothing outside a build."""
    cancelled = getattr(_current, "cancelled", None)
    if cancelled is not None and cancelled.is_set():
        raise BuildCancelled("the fence build was cancelled: its request is over its compile budget")
